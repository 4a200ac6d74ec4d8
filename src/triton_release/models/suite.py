"""A golden suite: the cases of some models, run as pytest items through the project's plugin
against a running server, collected into one typed `GoldenRun`."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from triton_release.errors import Interrupted, Refused, UsageError
from triton_release.models import golden
from triton_release.models.graph import needed
from triton_release.models.inference import CaseResult
from triton_release.models.repository import Repository
from triton_release.signals import pending_interrupt


@dataclass(frozen=True)
class GoldenRun:
    image: str
    loaded: tuple[str, ...]
    cases: tuple[CaseResult, ...]
    untested: tuple[str, ...]  # models without golden cases

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    @property
    def failed(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    def to_json(self) -> dict:
        return {"image": self.image, "loaded": list(self.loaded), "passed": self.passed,
                "cases": [c.to_json() for c in self.cases], "models_without_golden_cases": list(self.untested)}


def models_to_load(repo: Repository, names: list[str]) -> dict[str, int | None]:
    """The models to test plus every model they need (an ensemble's steps), newest versions."""
    missing = [n for n in names if n not in repo]
    if missing:
        raise UsageError(f"model {missing[0]!r} is not in {repo.root} (models: {', '.join(sorted(repo.models))}).")
    wanted = needed(names, repo.needs())
    absent = sorted(n for n in wanted if n not in repo)
    if absent:
        raise Refused(f"model {absent[0]!r}, which {', '.join(names)} need, is not in {repo.root}; run "
                      "`triton-release validate`.")
    return {n: repo[n].newest_version for n in sorted(wanted)}


def load_cases(repo: Repository, names: list[str]) -> list[golden.GoldenCase]:
    """Every case of `names`, all well-formed, before any server starts."""
    cases = []
    for name in names:
        for path in repo[name].golden_cases:
            case, problems = golden.load_case(path, name)
            if problems:
                raise Refused(f"{problems[0]}. Fix the golden file (run `triton-release validate` to see all).")
            cases.append(case)
    return cases


class _Collector:
    """Collects each golden item's CaseResult as pytest runs it."""

    def __init__(self) -> None:
        self.cases: list[CaseResult] = []

    def pytest_runtest_makereport(self, item, call):
        if call.when != "call":
            return
        result = getattr(item, "result", None)
        if result is None:  # the item failed before it got an answer
            result = CaseResult(item.name, str(item.path), False, 0.0, (),
                                str(call.excinfo.value) if call.excinfo else "no answer")
        self.cases.append(result)


def run_suite(repo: Repository, names: list[str], http_url: str, grpc_url: str, *,
              junitxml: str | None = None, keyword: str | None = None) -> list[CaseResult]:
    """pytest in-process with the plugin: one item per golden case, `<model>/<case>`."""
    import pytest

    collector = _Collector()
    root = str(repo.root.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        args = [root, "--triton-url", http_url, "--triton-grpc-url", grpc_url, "--model-repository", root,
                "--triton-models", ",".join(names), "-c", str(ini), "--rootdir", root, "--noconftest",
                "-p", "triton_release.models.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:terminal"]
        if junitxml:
            args += ["--junitxml", str(Path(junitxml).resolve())]
        if keyword:
            args += ["-k", keyword]
        code = pytest.main(args, plugins=[collector])
    if code == pytest.ExitCode.INTERRUPTED:  # pytest caught the signal: raise it again, the run stops
        raise pending_interrupt() or Interrupted("SIGINT", 130)
    if code == pytest.ExitCode.USAGE_ERROR:
        raise UsageError(f"pytest refused the golden run's arguments (is -k {keyword!r} a valid expression?).")
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise Refused(f"pytest could not run the golden cases of {repo.root} (exit {int(code)}); "
                      f"check -k and the golden files (`triton-release validate`).")
    return collector.cases
