"""The pipeline: one function per step, each returning a plain result object."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from triton_release import baseimage, golden, requirements, stub
from triton_release.baseimage import BaseImage
from triton_release.errors import Refused, UsageError
from triton_release.image import BuildResult, Runtime, build_image, docker_client
from triton_release.repository import Repository
from triton_release.requirements import Resolved
from triton_release.server import TritonServer
from triton_release.stub import StubChoice


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


def golden_step(repo: Repository, image: str, names: list[str], load_timeout: float = 300) -> GoldenRun:
    load = models_to_load(repo, names)
    cases = load_cases(repo, names)
    every = set(load) == set(repo.models)
    with TritonServer(image, load, all_models=every, load_timeout=load_timeout, client=docker_client()) as server:
        results = tuple(golden.run_case(case, server.http_url, server.grpc_url) for case in cases)
    untested = tuple(n for n in names if not repo[n].golden_cases)
    return GoldenRun(image, tuple(load), results, untested)
