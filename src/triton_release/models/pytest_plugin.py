"""The golden cases as pytest items, `<model>/<case>`, against a running tritonserver.

    pytest --triton-url 127.0.0.1:8000 --model-repository model_repository [-k add_sub] [--junitxml out.xml]

`triton-release test` runs pytest in-process with this plugin against the server it started,
so `-k`, JUnit XML and the usual reporters work the same in both places.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from triton_release.models import golden, inference
from triton_release.models.repository import GOLDEN_DIR, Repository

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr, TracebackStyle


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("triton-release", "golden-input tests against a running tritonserver")
    group.addoption("--triton-url", metavar="HOST:PORT", help="the server's HTTP endpoint; turns the golden cases on")
    group.addoption("--triton-grpc-url", metavar="HOST:PORT", help="its gRPC endpoint (default: HOST:8001)")
    group.addoption(
        "--model-repository",
        metavar="DIR",
        default="model_repository",
        help="the model repository holding <model>/golden/*.json (default: model_repository)",
    )
    group.addoption("--triton-models", metavar="A,B", help="only these models' cases (default: every model)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("triton_url") and not config.option.file_or_dir:
        config.args[:] = [str(Path(config.getoption("model_repository")).resolve())]


def _repository(config: pytest.Config) -> Repository:
    repo = config.stash.get(_REPO, None)
    if repo is None:
        repo = Repository.load(Path(config.getoption("model_repository")).resolve())
        config.stash[_REPO] = repo
    return repo


_REPO = pytest.StashKey[Repository]()


def use_repository(config: pytest.Config, repo: Repository) -> None:
    """The repository the golden run already loaded (in-process runs)."""
    config.stash[_REPO] = repo


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> GoldenFile | None:
    config = parent.config
    if not config.getoption("triton_url") or file_path.suffix != ".json" or file_path.parent.name != GOLDEN_DIR:
        return None
    repo = _repository(config)
    model = file_path.parent.parent
    if model.parent != repo.root.resolve() or model.name not in repo:
        return None
    wanted = config.getoption("triton_models")
    if wanted and model.name not in wanted.split(","):
        return None
    return GoldenFile.from_parent(parent, path=file_path)


class GoldenFile(pytest.File):
    def collect(self) -> Iterator[GoldenItem]:
        model = self.path.parent.parent.name
        yield GoldenItem.from_parent(self, name=f"{model}/{self.path.stem}", model=model)


class GoldenMismatch(Exception):
    pass


class GoldenItem(pytest.Item):
    def __init__(self, *, model: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.model = model
        self.result: inference.CaseResult | None = None

    def runtest(self) -> None:
        config = self.config
        case, problems = golden.load_case(self.path, self.model)
        if problems:
            raise GoldenMismatch("; ".join(str(p) for p in problems))
        assert case is not None
        http = config.getoption("triton_url")
        grpc = config.getoption("triton_grpc_url") or f"{http.rsplit(':', 1)[0]}:8001"
        repo = _repository(config)
        self.result = inference.run_case(case, http, grpc, decoupled=repo[self.model].decoupled)
        self.user_properties.append(("latency_ms", round(self.result.latency_ms, 3)))
        for output in self.result.outputs:
            if output.max_abs_diff is not None:
                self.user_properties.append((f"{output.name}.max_abs_diff", output.max_abs_diff))
                self.user_properties.append((f"{output.name}.max_rel_diff", output.max_rel_diff))
        if self.result.steps:
            self.user_properties.append(("steps_passed", f"{self.result.steps_passed}/{self.result.steps}"))
        if self.result.error is not None:
            self.user_properties.append(("error", self.result.error))
        if not self.result.passed:
            raise GoldenMismatch(self.result.message)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: TracebackStyle | None = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, GoldenMismatch):
            return f"{self.path}: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name
