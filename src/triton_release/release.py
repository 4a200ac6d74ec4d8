"""`release`: validate, changed, bump, build, test, push, each step timed in its own log group.

A failure stops the run with that step's exit code and leaves the registry and the working
tree as they were: nothing is pushed before every golden case passed, and the bump is undone
unless the release succeeded.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from triton_release.console import Console
from triton_release.history.changes import ChangeSet, Changes
from triton_release.errors import Refused, TritonReleaseError
from triton_release.history.git import Git
from triton_release.image.build import docker_client
from triton_release.registry.publish import finish_interrupted, push, release_versions
from triton_release.registry.client import RegistryRepository
from triton_release.steps import build_step, golden_step
from triton_release.models.repository import Problem, Repository
from triton_release.settings import cache_dir
from triton_release.models.validate import validate
from triton_release.history.versioning import apply_bumps, next_version, plan_bumps, previous_release, release_kind, undo_bumps

CANDIDATE_TAG = "candidate"  # the local build tag; the previous candidate's layer order keeps the cache warm


@dataclass(frozen=True)
class ReleaseRequest:
    model_repository: Path
    repo: RegistryRepository | None  # None: --no-push without a registry (pull requests)
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


class Steps:
    """Runs the steps; records each one's result and time in the report."""

    def __init__(self, console: Console, report: dict) -> None:
        self.console = console
        self.report = report
        report.setdefault("steps", {})

    @contextmanager
    def step(self, name: str) -> Iterator[dict]:
        result: dict = {}
        start = time.perf_counter()
        with self.console.group(name):
            try:
                yield result
            except TritonReleaseError as exc:
                result.update({"ok": False, "exit_code": exc.exit_code})
                raise
            finally:
                result["seconds"] = round(time.perf_counter() - start, 3)
                result.setdefault("ok", True)
                self.report["steps"][name] = result
        self.console.line(f"{name}: done in {result['seconds']:.1f} s")


def default_base(repo: RegistryRepository | None, git: Git) -> tuple[str | None, str]:
    """The commit of the last release: its vX.Y.Z git tag (the commit holding its bump), else its
    image's revision label, else the newest vX.Y.Z git tag."""
    versions = release_versions(repo.tags()) if repo is not None else []
    if versions:
        tag = f"v{versions[-1]}"
        if git.run("rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}", check=False).returncode == 0:
            return tag, f"git tag {tag} of the latest release {repo}:{versions[-1]}"
        labels = repo.image_config(str(versions[-1])).get("config", {}).get("Labels") or {}
        revision = labels.get("org.opencontainers.image.revision", "")
        if revision and git.run("cat-file", "-e", f"{revision}^{{commit}}", check=False).returncode == 0:
            return revision, f"the revision of {repo}:{versions[-1]}"
    tags = [t for t in git.tags("v*") if t[1:].count(".") == 2 and t[1:].replace(".", "").isdigit()]
    if tags:
        newest = max(tags, key=lambda t: tuple(int(p) for p in t[1:].split(".")))
        return newest, f"git tag {newest}"
    return None, "no earlier release: a first release of every model"


@contextmanager
def exclusive(repo: RegistryRepository | None, console: Console) -> Iterator[None]:
    """One release of a registry repository at a time on this machine: a second one waits, then
    computes its version after the first one's push."""
    if repo is None:
        yield
        return
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{hashlib.sha256(str(repo).encode()).hexdigest()[:16]}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            console.line(f"another release of {repo} is running on this machine; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_release(request: ReleaseRequest, console: Console, report: dict) -> dict:
    with exclusive(request.repo if request.push else None, console):
        return _run_release(request, console, report)


def _run_release(request: ReleaseRequest, console: Console, report: dict) -> dict:
    steps = Steps(console, report)
    root = request.model_repository
    git = Git(Git(root).toplevel())

    with steps.step("validate") as out:
        checked = validate(root)
        out.update({"models": len(checked.models), "golden_cases": checked.golden_cases})
        if not checked.ok:
            for problem in checked.problems:
                console.problem(problem)
            more = len(checked.problems) - 1
            raise Refused(f"{checked.problems[0]}" + (f" (and {more} more problem{'s' if more > 1 else ''}, listed "
                          "above)" if more else "") + ". Fix it and run again.", report={"validate": checked.to_json()})

    with steps.step("changed") as out:
        base, why = (request.base, "--base") if request.base else default_base(request.repo, git)
        found: ChangeSet = Changes(root).between(base, request.head)
        bumps = plan_bumps(found)
        kind = release_kind(found, bumps)
        previous, source = previous_release(request.repo.tags() if request.repo else [], git)
        version = next_version(previous, kind.kind)
        tested = sorted([n for n, c in found.models.items() if c.status != "removed"] + list(found.ensembles))
        out.update({"base": found.base, "base_from": why, "head": found.head, "changes": found.to_json(),
                    "release": kind.to_json(), "previous_version": str(previous) if previous else None,
                    "previous_from": source, "version": str(version) if version else None})
        report["changed_models"] = sorted(found.models)
        report["version"] = str(version) if version else None
        for name, change in sorted(found.models.items()):
            console.line(f"{name}: {change.status}; {'; '.join(change.reasons)}")
        console.line(f"release: {kind.kind or 'nothing'} -> {version or '(none)'} (previous: {previous or 'none'})")
    if not tested:
        console.line("no model changed: nothing built, nothing pushed")
        report["released"] = False
        if request.push and request.repo is not None:
            finished = finish_interrupted(request.repo, request.channel)
            if finished:
                console.line(f"finished the interrupted release {previous}: tags {', '.join(finished)}")
                report["finished_tags"] = finished
        return report

    applied = False
    try:
        with steps.step("bump") as out:
            apply_bumps(found, bumps, root)
            applied = bool(bumps)
            out["bumps"] = [b.to_json() for b in bumps]
            for bump in bumps:
                console.line(f"{found.prefix}/{bump.model}/{bump.to_version}: new version folder")

        with steps.step("build") as out:
            local = re.sub(r"[^a-z0-9._-]+", "-", git.cwd.name.lower()).strip("-._") or "models"
            candidate = f"{request.repo or 'triton-release/' + local}:{CANDIDATE_TAG}"
            built = build_step(Repository.load(root), request.base_image, candidate, python=request.python,
                               stub_mode=request.stub, revision=found.head or "", version=str(version or ""))
            for warning in built.warnings:
                console.warning(warning)
            console.line(built.summary())
            out.update(built.to_json())

        with steps.step("test") as out:
            run = golden_step(Repository.load(root), built.build.image_id, tested, request.load_timeout)
            out.update(run.to_json())
            for case in run.cases:
                console.line(f"{'PASS' if case.passed else 'FAIL'} {case.case} ({case.latency_ms:.1f} ms)"
                             + (f": {case.message}" if case.message else ""))
            for name in run.untested:
                console.warning(f"{name} has no golden cases; it loaded, nothing more is proven")
            failed = [c for c in run.cases if not c.passed]
            for case in failed:
                console.problem(Problem(Path(case.path), f"{case.case}: {case.message}"))
            if failed:
                raise Refused(f"""
                    {len(failed)} of {len(run.cases)} golden cases failed (first: {failed[0].path}:
                    {failed[0].message}). Nothing was pushed. Fix the model or, if the new answer is right,
                    the golden file.""")

        if version is None:
            console.line("only golden cases changed: tested, nothing to release")
            report["released"] = False
        elif not request.push:
            console.line(f"--no-push: {version} built and tested, not pushed")
            report["released"] = False
        else:
            with steps.step("push") as out:
                pushed = push(docker_client(), built.build.image_id, request.repo, str(version), found.head,
                              request.channel, request.keep)
                out.update(pushed.to_json())
                report.update({"image": f"{request.repo}:{version}", "digest": pushed.digest, "released": True})
                console.line(f"pushed {request.repo}:{version} ({pushed.digest}); tags {', '.join(pushed.tags)}; "
                             f"{pushed.layers_uploaded} layers uploaded, {pushed.layers_mounted + pushed.layers_present} already in the registry")
            if request.commit:
                with steps.step("commit") as out:
                    out.update(commit_release(git, root, str(version)))
    except BaseException:
        if applied:
            undo_bumps(found, bumps, root)
            report.setdefault("steps", {}).setdefault("bump", {})["undone"] = True
        raise
    return report


def commit_release(git: Git, root: Path, version: str) -> dict:
    """Commit the new version folders as `release X.Y.Z` and tag vX.Y.Z in the workspace."""
    git.run("add", "--", str(root.resolve()))
    staged = git.run("diff", "--cached", "--quiet", check=False).returncode != 0
    if staged:
        identity = []
        if git.run("config", "user.name", check=False).returncode != 0:
            identity = ["-c", "user.name=github-actions[bot]",
                        "-c", "user.email=41898282+github-actions[bot]@users.noreply.github.com"]
        git.run(*identity, "commit", "-q", "-m", f"release {version}")
    git.run("tag", f"v{version}")
    return {"committed": staged, "tag": f"v{version}", "commit": git.text("rev-parse", "HEAD")}
