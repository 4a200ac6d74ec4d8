"""The release: validate, changed, bump, build, test, then push, commit and retain.

Two halves with a different answer to failure:
- Until every golden case passed, a failure undoes the bump: the working tree is left as it
  was and nothing is pushed.
- From the push on, what is published stays published. These steps are idempotent and a rerun
  finishes them (the X.Y.Z already pushed is resumed, its tags moved, the commit made); they are
  never rolled back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from triton_release import steps
from triton_release.cache import exclusive
from triton_release.history import releases
from triton_release.history.git import Git
from triton_release.session import Session

if TYPE_CHECKING:
    from triton_release.registry.client import RegistryRepository

CANDIDATE_TAG = "candidate"  # the local build tag; the previous candidate's layer order keeps the cache warm


@dataclass(frozen=True)
class ReleaseRequest:
    model_repository: Path
    registry: "RegistryRepository | None"  # None: --no-push without a registry (pull requests)
    base: str | None
    head: str
    base_image: str
    python: str | None
    stub: str
    load_timeout: float
    channel: str
    keep: int | None
    push: bool
    commit: bool
    source: str = ""  # the source repository's URL, for the image's label


def provenance_source(env: Mapping[str, str]) -> str:
    """The source repository's URL inside GitHub Actions, for the OCI source label."""
    server, name = env.get("GITHUB_SERVER_URL", ""), env.get("GITHUB_REPOSITORY", "")
    return f"{server}/{name}" if server and name else ""


def local_candidate(request: ReleaseRequest, git: Git) -> str:
    local = re.sub(r"[^a-z0-9._-]+", "-", git.cwd.name.lower()).strip("-._") or "models"
    return f"{request.registry or 'triton-release/' + local}:{CANDIDATE_TAG}"


def run_release(request: ReleaseRequest, session: Session) -> None:
    releases.check_channel(request.channel)  # every argument checked before the first side effect
    lock = f"release {request.registry}" if request.push and request.registry is not None else None
    if lock is None:
        _release(request, session)
        return
    on_wait = lambda: session.console.line(f"another release of {request.registry} is running on this machine; "  # noqa: E731
                                           "waiting for it")
    with exclusive(lock, on_wait):
        _release(request, session)


def _release(request: ReleaseRequest, session: Session) -> None:
    console, report = session.console, session.report
    root = request.model_repository

    session.step("validate", console.validation, steps.validate, root)
    planned = session.step("changed", console.changes, steps.changes, root, request.base, request.head,
                           registry=request.registry, plan=True)
    version = planned.plan.version
    if not planned.to_test:
        console.line("no model changed: nothing built, nothing pushed")
        report.facts["released"] = False
        if request.push and request.registry is not None:
            session.step("finish", console.finished, steps.finish_interrupted, request.registry, request.channel)
        return

    # -- undone on failure --------------------------------------------------------------------
    bumped = False
    try:
        session.step("bump", console.bumped, steps.bump, root, planned)
        bumped = bool(planned.bumps)
        git = Git(Git(root).toplevel())
        built = session.step("build", console.built, steps.build, root, request.base_image,
                             local_candidate(request, git), python=request.python, stub_mode=request.stub,
                             revision=planned.found.head or "", source=request.source, version=version or "")
        session.step("test", console.golden_run, steps.test, root, built.image_id, planned.to_test,
                     request.load_timeout)
    except BaseException:
        if bumped:
            _undo_bump(session, root, planned)
        raise

    # -- finished forward by a rerun ----------------------------------------------------------
    if version is None:
        console.line("only golden cases changed: tested, nothing to release")
        report.facts["released"] = False
        return
    if not request.push:
        console.line(f"--no-push: {version} built and tested, not pushed")
        report.facts["released"] = False
        return
    session.step("push", console.pushed, steps.push, built.image_id, request.registry, version,
                 planned.found.head, request.channel)
    if request.commit:
        session.step("commit", console.committed, steps.commit, root, version)
    if request.keep is not None:
        session.step("retain", console.retained, steps.retain, request.registry, request.keep, request.channel)


def _undo_bump(session: Session, root: Path, planned: steps.ChangesResult) -> None:
    """Put the working tree back; a failure here is a warning, never the error reported."""
    try:
        session.step("undo-bump", None, steps.undo_bump, root, planned)
    except Exception as exc:
        session.console.warning(f"could not undo the bump ({exc}); restore the version folders with "
                                f"`git checkout -- {planned.found.prefix}` and remove the new ones")


@dataclass(frozen=True)
class RollbackRequest:
    registry: "RegistryRepository"
    version: str
    channel: str
    verify: bool = False
    model_repository: Path | None = None  # with verify: the golden cases' repository (and its git)
    load_timeout: float = 300


def run_rollback(request: RollbackRequest, session: Session) -> None:
    """Point the channel at release X.Y.Z; with `verify`, only after its own golden cases pass."""
    releases.check_channel(request.channel)
    releases.parse_version(request.version, "--to-version")
    def verify(image: str):
        return session.step("verify", session.console.golden_run, steps.verify_release, image,
                            request.model_repository, request.load_timeout, request.registry.credentials)

    check: Callable | None = verify if request.verify else None
    session.step("rollback", session.console.rolled_back, steps.rollback, request.registry, request.version,
                 request.channel, check)
