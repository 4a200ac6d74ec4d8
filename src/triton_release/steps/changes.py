"""Validate and changes: the model repository checked, and the change a release makes (with the
version it makes, read against the registry's releases, its ledger and its record)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import semver

from triton_release.contract import LEDGER_TAG, RELEASED_VERSIONS_LABEL, REVISION_LABEL, is_ledger_tag
from triton_release.errors import Refused, UsageError
from triton_release.history import released_versions, releases
from triton_release.history.bump import Carried, plan_bumps
from triton_release.history.changes import Changes
from triton_release.history.git import Git
from triton_release.history.planned import ChangesResult, VersionPlan
from triton_release.models.repository import not_a_model_repository
from triton_release.models.validate import ValidationResult
from triton_release.models.validate import validate as validate_repository

if TYPE_CHECKING:
    from triton_release.registry.client import RegistryRepository
    from triton_release.registry.ledger import Ledger


def validate(
    root: Path, *, requirements_options: str = "refuse", custom_backends: tuple[str, ...] = ()
) -> ValidationResult:
    problem = not_a_model_repository(root)
    if problem:  # "0 models, no problems" would pass a wrong --model-repository
        raise UsageError(problem)
    result = validate_repository(root, requirements_options, custom_backends)
    if not result.ok:  # the problems are listed by the step's result; the closing line counts them
        raise Refused(result.summary(), result=result)
    return result


def changes(
    root: Path,
    base: str | None,
    *,
    head: str = "HEAD",
    registry: RegistryRepository | None = None,
    plan: bool = False,
) -> ChangesResult:
    """The change between `base` and `head`; without `base` and with `plan`, since the last release.
    With `plan`, also the version it makes (the previous release read from the registry)."""
    git = Git(Git(root).toplevel())
    base_from = "--base"
    warnings: tuple[str, ...] = ()
    fetched = ""
    ledger = _ledger(registry) if plan else None
    if base is None and plan:
        fetched = releases.whole_history(git, "the last release's commit and its tags are needed")
        last = releases.last_release_commit(registry, git, head, ledger.releases if ledger else {})
        base, base_from, warnings = last.commit, last.why, last.warnings
    elif base is None:
        base_from = "no --base: a first release of every model"
    elif not git.has_commit(base):
        fetched = releases.whole_history(git, f"the base {base!r} is not among its commits")
    if fetched:
        warnings = (fetched, *warnings)
    found = Changes(root).between(base, head)
    uncommitted = not_committed(git, found.prefix, found.head)
    if not plan:
        bumps = plan_bumps(found)
        kind = releases.release_kind(found, {b.model for b in bumps})
        return ChangesResult(found, tuple(bumps), kind, base_from, warnings=warnings, uncommitted=uncommitted)
    previous, source = releases.previous_release(registry.tags() if registry is not None else [], git)
    labels = (
        (registry.image_config(str(previous)).get("config", {}).get("Labels") or {})
        if registry is not None and source == "registry"
        else {}
    )
    where = f"{registry}:{previous}"
    shipped = released_versions.parse(labels.get(RELEASED_VERSIONS_LABEL))
    if shipped is None and labels.get(RELEASED_VERSIONS_LABEL):
        raise Refused(f"""
            {where}'s record of released versions (label {RELEASED_VERSIONS_LABEL}) cannot be read: it is not
            trusted, and nothing was built. Find out who pushed {where}; triton-release writes that label as
            JSON, model -> version -> git tree.""")
    if shipped is not None:
        what = f"The record of {where} (label {RELEASED_VERSIONS_LABEL})"
        released_versions.prove(git, shipped, [str(labels.get(REVISION_LABEL) or "")], found.prefix, what)
    if ledger is not None and ledger.releases:
        newest = ledger.newest
        if newest is not None and (previous is None or newest > previous):
            warnings = (
                *warnings,
                f"{registry}:{newest} was released (the registry's ledger, {registry}:{LEDGER_TAG}.*, says so) "
                "and is gone from the registry: the next release is numbered after it, and every version it "
                "shipped is kept as it shipped it",
            )
            previous, source, where = newest, "the registry's ledger", f"{registry}:{LEDGER_TAG}.*"
        what = f"The registry's ledger {registry}:{LEDGER_TAG}.*"
        # each version against the folders of the releases' own commits (the newest last), never today's head
        commits = [commit for _, commit in sorted(ledger.releases.items(), key=lambda r: semver.Version.parse(r[0]))]
        released_versions.prove(git, ledger.versions, commits, found.prefix, what)
        shipped = released_versions.merged(shipped, ledger.versions, where)
    bumps = plan_bumps(found, edits=shipped is None)
    carried: tuple[Carried, ...] = ()
    head_record = released_versions.trees_at(git, found.head, found.prefix)
    if shipped is not None:
        reconciled = released_versions.reconcile(git, found, bumps, shipped, where, head_record)
        found, bumps, carried = reconciled.changes, list(reconciled.bumps), reconciled.carried
    record = released_versions.shipped(git, found, head_record, [*bumps, *carried])
    kind = releases.release_kind(found, {b.model for b in bumps})
    version = releases.next_version(previous, kind.kind)
    version_plan = VersionPlan(str(previous) if previous else None, source, str(version) if version else None)
    return ChangesResult(
        found, tuple(bumps), kind, base_from, version_plan, tuple(carried), record, warnings, uncommitted
    )


MAX_UNCOMMITTED = 20  # paths named; the count says how many more


def not_committed(git: Git, prefix: str, head: str) -> tuple[str, ...]:
    """What the checkout holds below the model repository that the commit compared does not: each
    path with why ("not tracked by git", "changed"), a new folder as one path. Nothing when `head`
    is not the commit checked out (the working tree is then no part of it)."""
    if git.text("rev-parse", "HEAD") != head:
        return ()
    listed = git.run("status", "--porcelain=v1", "-z", "--", prefix).stdout.decode(errors="surrogateescape")
    found = []
    entries = iter(listed.split("\0"))
    for entry in entries:
        if len(entry) <= 3:
            continue
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            next(entries, None)  # a rename's or copy's source follows
        found.append(f"{path} ({'not tracked by git' if code == '??' else 'changed'})")
    if len(found) > MAX_UNCOMMITTED:
        found = [*found[:MAX_UNCOMMITTED], f"and {len(found) - MAX_UNCOMMITTED} more"]
    return tuple(found)


def _ledger(registry: RegistryRepository | None) -> Ledger | None:
    """The registry's ledger of every release (registry/ledger.py); None without a registry."""
    if registry is None:
        return None
    from triton_release.registry.ledger import Ledger, read_ledger

    # its tags are listed with the releases': the tags are read first, and a registry without one is asked nothing more
    tags = registry.tags()
    return read_ledger(registry, tags) if any(is_ledger_tag(tag) for tag in tags) else Ledger()
