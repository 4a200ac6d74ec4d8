"""The pipeline: one function per step, each returning a plain result object."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from triton_release import golden
from triton_release.errors import Refused, UsageError
from triton_release.image import BuildResult, build_image, docker_client
from triton_release.repository import Repository
from triton_release.server import TritonServer


def build_step(repo: Repository, base_image: str, tag: str, revision: str = "", source: str = "",
               version: str = "") -> BuildResult:
    models = {m.name: list(m.versions) for m in repo}
    labels = {
        "org.opencontainers.image.created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.source": source,
        "org.opencontainers.image.version": version,
        "triton-release.models": json.dumps(models, sort_keys=True),
    }
    return build_image(repo, base_image, tag, {k: v for k, v in labels.items() if v})


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
