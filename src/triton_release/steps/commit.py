"""The release commit finished or redone: after a run that pushed and stopped before committing,
and after a promote, the bump a release shipped is redone from its labels and committed
(history/commit.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release import contract
from triton_release.contract import BASE_LABEL, RELEASED_VERSIONS_LABEL, REVISION_LABEL
from triton_release.errors import Interrupted, Refused
from triton_release.history import released_versions, releases
from triton_release.history.bump import BumpResult, Carried, folder_writes, holds_bump
from triton_release.history.changes import Changes, ChangeSet
from triton_release.history.commit import Committed, commit
from triton_release.history.git import Git
from triton_release.history.journal import Journal
from triton_release.history.planned import ChangesResult
from triton_release.steps.bump import bump
from triton_release.steps.changes import changes

log = logging.getLogger("triton_release")

if TYPE_CHECKING:
    from triton_release.registry.client import RegistryRepository


def finish_commit(root: Path, repository: RegistryRepository) -> Committed | None:
    """The commit and git tag of the newest release, when the run that pushed it stopped before
    making them: its bump is redone from the commits in its labels (bump is deterministic), on
    the checkout of the commit it was built from. None when there is nothing to finish."""
    versions = releases.versions_in(repository.tags())
    if not versions:
        return None
    version = str(versions[-1])
    git = Git(Git(root).toplevel())
    if git.has_commit(contract.git_tag(version)):
        return None
    labels = repository.image_config(version).get("config", {}).get("Labels") or {}
    revision, base = labels.get(REVISION_LABEL, ""), labels.get(BASE_LABEL, "")
    if not revision or git.text("rev-parse", "HEAD") != revision:
        log.warning(
            f"{repository}:{version} has no git tag {contract.git_tag(version)}; it was built from "
            f"{revision[:12] or 'an unknown commit'}, not the checked-out commit, so its release commit is "
            "not made here"
        )
        return None
    released = f"{repository}:{version}"
    shipped = released_versions.parse(labels.get(RELEASED_VERSIONS_LABEL))
    planned = (
        changes(root, base or None, head=revision)
        if shipped is None
        else as_recorded(root, revision, shipped, released)
    )
    return commit_shipped(root, version, planned, released)


def as_recorded(root: Path, revision: str, shipped: Mapping, released: str) -> ChangesResult:
    """The writes that make the checkout of `revision` hold every version folder as `released`
    shipped it (its record): the exact bump, whatever git kept of earlier ones."""
    git, repository = Git(Git(root).toplevel()), Changes(root)
    found = ChangeSet(None, repository.resolve(None, revision)[1], repository.prefix)
    held = released_versions.trees_at(git, found.head, found.prefix)
    carried = tuple(
        Carried(model, version, tree, released, at_head=version in held.get(model, {}))
        for model, versions in sorted(shipped.items())
        if model in held
        for version, tree in sorted(versions.items())
        if held[model].get(version) != tree
    )
    return ChangesResult(
        found, (), releases.ReleaseKind(None, ()), f"the record of {released}", carried=carried, record=dict(shipped)
    )


def holds_shipped_bump(root: Path, planned: ChangesResult, released: str) -> bool:
    """Whether the working tree holds the bump's folders already (a stopped run's bump); refused
    when it holds new ones with other contents than `released` shipped."""
    fresh = [f"{b.model}/{b.to_version}" for b in planned.bumps]
    fresh += [f"{c.model}/{c.version}" for c in planned.carried if not c.at_head]
    if not any((root / folder).exists() for folder in fresh):
        return False
    if not holds_bump(planned.found, planned.writes, root):
        raise Refused(f"""
            The working tree holds the new version folders of {released} with other contents than it
            shipped: {", ".join(fresh)}. Put them back as shipped (remove them and run again: the bump is
            redone), then commit the changes as a new release.""")
    return True


def commit_shipped(root: Path, version: str, planned: ChangesResult, released: str) -> Committed:
    """The bump `released` shipped, redone in the working tree from the same commits (bump is
    deterministic) unless it is there already, committed as `release X.Y.Z` and tagged."""
    bumped: BumpResult | None
    try:
        if holds_shipped_bump(root, planned, released):
            # a stopped run's, untouched
            trees = tuple(folder_writes(Git(Git(root).toplevel()), planned.found, planned.writes))
            bumped = BumpResult(planned.found.prefix, planned.bumps, carried=planned.carried, trees=trees)
        else:
            bumped = bump(root, planned) if planned.writes else None
        journal = Journal.around(root)
        journal.phase("committing", version)  # killed in git: the next run clears its lock and tags the commit
        committed = commit(root, version, bumped, planned.found.head)
        journal.end()  # the bump is committed: no later run takes it for a stopped one's
    except Interrupted as exc:  # `released` is out whatever this run did: the rerun finishes its commit
        exc.published = exc.published or released
        raise
    return committed
