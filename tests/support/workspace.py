"""The fault suite's released workspace: a git repository with two models, released once to the
local registry by the real pipeline, that each case changes and runs `release` in as a user
would (a subprocess). And the invariants every refusal keeps: the exit code, one clear message,
nothing half-done."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.git import GitRepo
from support.models import python_model_files
from support.registries import copy_repository
from support.reports import read_report
from support.stack import BASE_IMAGE, PROBES, SERVERS
from support.tool import tool_command
from triton_release.contract import is_ledger_tag
from triton_release.registry.client import RegistryRepository


@dataclass(frozen=True)
class Outcome:
    code: int
    report: dict
    out: str  # stdout and stderr together

    @property
    def message(self) -> str:
        return (self.report.get("error") or {}).get("message", "")


@dataclass(frozen=True)
class State:
    tags: dict
    status: str
    files: frozenset


class Workspace:
    """Two models, released as 1.0.0 to `image`; or, `branched_from` another workspace, a copy of its
    checkout and of its registry repository's releases (support/registries.copy_repository), as if
    the same release had been made here, without making it again."""

    def __init__(self, root: Path, image: str, docker_client, branched_from: Workspace | None = None) -> None:
        if branched_from is not None:
            shutil.copytree(branched_from.root, root, symlinks=True)
        self.git_repo = GitRepo(root)
        self.root, self.models = root, root / "model_repository"
        self.image = image
        self.registry = RegistryRepository.parse(image)
        self.docker = docker_client
        if branched_from is not None:
            copy_repository(branched_from.registry, self.registry)
            self.released = branched_from.released
            return
        self.git_repo.write({**python_model_files("a"), **python_model_files("b")})
        self.released = self.git_repo.commit("two models")
        outcome = self.release()
        assert outcome.code == 0, outcome.out[-3000:]
        self.git_repo.git("tag", "released")

    def write(self, files: dict) -> None:
        self.git_repo.write(files)

    def commit(self, message: str = "a bad change") -> str:
        return self.git_repo.commit(message)

    def run(self, *args: str, env: dict | None = None, timeout: int = 600) -> Outcome:
        report = self.root.parent / "report.json"
        report.unlink(missing_ok=True)
        done = subprocess.run(
            tool_command(*args, "--report", str(report)),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        data = read_report(report) if report.exists() else {}
        return Outcome(done.returncode, data, done.stdout + done.stderr)

    def release(self, *extra: str, env: dict | None = None) -> Outcome:
        return self.run(
            "release", "--to", self.image, "--base-image", BASE_IMAGE, "--load-timeout", "30", *extra, env=env
        )

    def state(self) -> State:
        # the releases' tags; the ledger (triton-release.ledger.*) gains entries with a push's attempt, by design
        tags = {t: self.registry.digest(t) for t in self.registry.tags() if not is_ledger_tag(t)}
        files = frozenset(str(p.relative_to(self.root)) for p in self.models.rglob("*"))
        return State(tags, self.git_repo.git("status", "--porcelain"), files)

    def reset(self) -> None:
        self.git_repo.git("reset", "-q", "--hard", "released")
        self.git_repo.git("clean", "-qfdx", "model_repository")


def change_a(ws: Workspace) -> None:
    """A committed change to model a's code, so that the next release has something to do."""
    model_py = ws.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\n# a change\n")
    ws.commit("a: a change")


def assert_refused_cleanly(ws: Workspace, before: State, outcome: Outcome, code: int, *fragments: str) -> None:
    """The exit code, the message's fragments, and nothing half-done: no tag pushed or moved, the
    working tree as it was, no container left."""
    assert outcome.code == code, outcome.out[-3000:]
    for fragment in fragments:
        assert fragment in outcome.message, (fragment, outcome.message)
    assert "Traceback" not in outcome.out, outcome.out[-3000:]
    after = ws.state()
    assert after.tags == before.tags
    assert after.status == before.status
    assert after.files == before.files
    for label in (SERVERS, PROBES):
        assert not ws.docker.containers.list(all=True, filters={"label": label})
