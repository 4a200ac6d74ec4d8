"""The pipeline: one function per step, each returning a plain result object."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import docker
import numpy as np
import pytest

from triton_release.image import base as baseimage
from triton_release.models import golden
from triton_release.image import requirements
from triton_release.image import stub
from triton_release.image.base import BaseImage
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history.git import Git
from triton_release.image.build import BuildResult, Runtime, build_image, docker_client
from triton_release.registry.client import Credentials
from triton_release.models.repository import Repository
from triton_release.image.requirements import Resolved
from triton_release.image.server import TritonServer
from triton_release.image.stub import StubChoice
from triton_release.history.versioning import extract_tree


@dataclass(frozen=True)
class ReleaseImage:
    """The built image and the decisions behind it."""
    build: BuildResult
    base: BaseImage
    stub: StubChoice
    requirements: Resolved | None
    warnings: tuple[str, ...]

    def summary(self) -> str:
        extra = f", {len(self.requirements.packages)} packages from requirements.txt" if self.requirements else ""
        return (f"{self.build.tag}: built FROM {self.base.image}, {len(self.build.layers)} layers{extra}; "
                f"{self.stub.summary()}")

    def to_json(self) -> dict:
        return {**self.build.to_json(), "stub": self.stub.to_json(), "base": self.base.to_json(),
                "requirements": self.requirements.to_json() if self.requirements else None,
                "warnings": list(self.warnings)}


def build_step(repo: Repository, base_image: str, tag: str, *, python: str | None = None, stub_mode: str = "auto",
               revision: str = "", source: str = "", version: str = "") -> ReleaseImage:
    """Inspect the base, choose the stub, resolve requirements, build, and prove the stub loads."""
    client = docker_client()
    base = baseimage.inspect(client, base_image)
    choice = stub.choose(base, python, stub_mode)
    install = base.pythons[choice.target_python]
    resolved = requirements.resolve(repo, install, base.glibc)
    warnings = list(choice.warnings)
    numpy = (resolved.packages.get("numpy", "") if resolved else "")
    if numpy and not choice.warnings:
        warnings += stub.numpy_warnings(base, replace(install, numpy=numpy))
    models = {m.name: list(m.versions) for m in repo}
    labels = {
        "org.opencontainers.image.created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.source": source,
        "org.opencontainers.image.version": version,
        "triton-release.models": json.dumps(models, sort_keys=True),
        "triton-release.python": choice.target_python,
        "triton-release.stub": f"{choice.provider}: {choice.origin}",
    }
    runtime = Runtime(choice.stub_file, choice.builder_stage, install.site_packages,
                      resolved.tree if resolved else None)
    built = build_image(repo, base_image, tag, {k: v for k, v in labels.items() if v}, client=client,
                        runtime=runtime)
    verify_stub(client, tag, install)
    return ReleaseImage(built, base, choice, resolved, tuple(warnings))


def verify_stub(client, tag: str, install) -> None:
    """ldd of the stub inside the built image: every library found, libpython the target's."""
    links = baseimage.check_stub(client, tag)
    resolved = links.resolved_to.rsplit("/", 1)[-1]
    if links.loads and resolved == install.soname:
        return
    try:
        client.images.remove(tag, force=True)
    except Exception:
        pass
    problem = (f"cannot find {', '.join(links.missing)}" if links.missing
               else f"links {links.resolved_to or links.libpython or 'no libpython'}, not {install.soname}")
    raise Refused(f"""
        The stub in the built image {tag} {problem}; tritonserver would hang loading any Python model.
        The image was removed. Choose another --stub or base image.""", details=links.ldd.splitlines())


@dataclass(frozen=True)
class GoldenRun:
    image: str
    loaded: tuple[str, ...]
    cases: tuple[golden.CaseResult, ...]
    untested: tuple[str, ...]  # models without golden cases

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def to_json(self) -> dict:
        return {"image": self.image, "loaded": list(self.loaded), "passed": self.passed,
                "cases": [c.to_json() for c in self.cases], "models_without_golden_cases": list(self.untested)}


def models_to_load(repo: Repository, names: list[str]) -> dict[str, int | None]:
    """The models to test plus every model their ensembles step through, newest versions."""
    wanted: set[str] = set()
    frontier = list(names)
    while frontier:
        name = frontier.pop()
        if name in wanted:
            continue
        if name not in repo:
            raise UsageError(f"model {name!r} is not in {repo.root} (models: {', '.join(sorted(repo.models))}).")
        wanted.add(name)
        frontier.extend(repo[name].ensemble_steps)
    return {n: repo[n].newest_version for n in sorted(wanted)}


def load_cases(repo: Repository, names: list[str]) -> list[golden.GoldenCase]:
    cases = []
    for name in names:
        for path in repo[name].golden_cases:
            case, problems = golden.load_case(path, name)
            if problems:
                raise Refused(f"{problems[0]}. Fix the golden file (run `triton-release validate` to see all).")
            cases.append(case)
    return cases


class _Results:
    """Collects each golden item's CaseResult as pytest runs it."""

    def __init__(self) -> None:
        self.cases: list[golden.CaseResult] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when == "call":
            result = getattr(item, "result", None)
            if result is None:  # the item failed before it got an answer
                result = golden.CaseResult(item.name, str(item.path), False, 0.0, (), str(call.excinfo.value)
                                           if call.excinfo else report.longreprtext)
            self.cases.append(result)


def run_golden_tests(repo: Repository, names: list[str], http_url: str, grpc_url: str, *,
                     junitxml: str | None = None, keyword: str | None = None) -> list[golden.CaseResult]:
    """pytest in-process with the plugin: one item per golden case, `<model>/<case>`."""
    results = _Results()
    with tempfile.TemporaryDirectory() as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        args = [str(repo.root.resolve()), "--triton-url", http_url, "--triton-grpc-url", grpc_url,
                "--model-repository", str(repo.root.resolve()), "--triton-models", ",".join(names),
                "-c", str(ini), "--rootdir", str(repo.root.resolve()), "--noconftest",
                "-p", "triton_release.models.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:terminal"]
        if junitxml:
            args += ["--junitxml", str(Path(junitxml).resolve())]
        if keyword:
            args += ["-k", keyword]
        code = pytest.main(args, plugins=[results])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise Refused(f"pytest could not run the golden cases of {repo.root} (exit {int(code)}); "
                      f"check -k and the golden files (`triton-release validate`).")
    return results.cases


def golden_step(repo: Repository, image: str, names: list[str], load_timeout: float = 300, *,
                junitxml: str | None = None, keyword: str | None = None) -> GoldenRun:
    load = models_to_load(repo, names)
    load_cases(repo, names)  # every case file well-formed before any server starts
    every = set(load) == set(repo.models)
    with TritonServer(image, load, all_models=every, load_timeout=load_timeout, client=docker_client()) as server:
        results = run_golden_tests(repo, names, server.http_url, server.grpc_url, junitxml=junitxml, keyword=keyword)
    untested = tuple(n for n in names if not repo[n].golden_cases)
    return GoldenRun(image, tuple(load), tuple(results), untested)


def tensor_json(name: str, array: np.ndarray, datatype: str) -> dict:
    data = array.reshape(-1).tolist()
    if datatype == "BYTES":
        data = [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v) for v in data]
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": data}


def record_step(repo: Repository, image: str, names: list[str], load_timeout: float = 300,
                overwrite: bool = False) -> list[str]:
    """Fill in the outputs of golden cases that have none with what the server answers."""
    todo = [c for c in load_cases(repo, names) if overwrite or not c.expected]
    if not todo:
        return []
    written = []
    load = models_to_load(repo, sorted({c.model for c in todo}))
    with TritonServer(image, load, load_timeout=load_timeout, client=docker_client()) as server:
        for case in todo:
            try:
                answers, _ = golden.send(case, server.http_url, server.grpc_url, decoupled=repo[case.model].decoupled)
            except golden.InferenceFailed as exc:
                raise Refused(f"{case.path}: the server refused the case's inputs ({exc}); fix the inputs.") from None
            responses = [[tensor_json(n, a, d) for n, (a, d, _) in sorted(answer.outputs.items()) if a is not None]
                         for answer in answers]
            raw = json.loads(case.path.read_text(encoding="utf-8"))
            raw["outputs"] = responses if repo[case.model].decoupled else responses[0]
            partial = case.path.with_name(case.path.name + ".partial")
            partial.write_text(json.dumps(raw, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            partial.replace(case.path)
            written.append(str(case.path))
    return written


def checkout_at(model_repository: Path, revision: str, dest: Path) -> Path | None:
    """The model repository as it was at `revision`, unpacked under `dest`; None when git lacks it."""
    git = Git(Git(model_repository).toplevel())
    if not revision or git.run("cat-file", "-e", f"{revision}^{{commit}}", check=False).returncode != 0:
        return None
    prefix = model_repository.resolve().relative_to(git.cwd.resolve()).as_posix()
    target = dest / "model_repository"
    extract_tree(git, revision, prefix, target)
    return target


def verify_release(image: str, model_repository: Path, load_timeout: float = 300,
                   credentials: Credentials | None = None) -> GoldenRun:
    """Pull a released image and run the golden cases of the commit it was built from."""
    client = docker_client()
    name, _, tag = image.rpartition(":")
    auth = {"username": credentials.username, "password": credentials.password} if credentials else None
    try:
        client.images.pull(name, tag=tag, auth_config=auth)
    except docker.errors.APIError as exc:
        raise InfrastructureError(f"Could not pull {image} to verify it: {exc.explanation or exc}") from None
    labels = client.images.get(image).labels or {}
    models = sorted(json.loads(labels.get("triton-release.models", "{}")))
    with tempfile.TemporaryDirectory() as tmp:
        root = checkout_at(model_repository, labels.get("org.opencontainers.image.revision", ""), Path(tmp))
        repo = Repository.load(root or model_repository)
        return golden_step(repo, image, [m for m in models if m in repo], load_timeout)
