"""Push, retain, commit: the release pushed and tagged in the registry, older releases retained,
and the release commit and git tag made (or finished after a stopped run)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.contract import BASE_LABEL, RELEASED_VERSIONS_LABEL, REVISION_LABEL, git_tag
from triton_release.errors import Refused
from triton_release.history import released_versions, releases
from triton_release.history.bump import Carried, holds_bump
from triton_release.history.changes import Changes, ChangeSet
from triton_release.history.git import Git
from triton_release.steps.changed import BumpResult, ChangesResult, bump, changes

log = logging.getLogger("triton_release")

if TYPE_CHECKING:
    from triton_release.registry.client import RegistryRepository
    from triton_release.registry.publish import Finished, PushResult, Retention, Tagged
    from triton_release.settings import PublishOptions


# -- push, retain, commit ---------------------------------------------------------------------


def push(image: str, repository: RegistryRepository, version: str) -> PushResult:
    from triton_release.image.engine import docker_client
    from triton_release.registry import publish

    return publish.push(docker_client(), image, repository, version)


def published(repository: RegistryRepository, version: str) -> bool | None:
    from triton_release.registry import publish

    return publish.published(repository, version)


def tag(
    repository: RegistryRepository,
    version: str,
    revision: str | None,
    options: PublishOptions,
    digest: str | None = None,
) -> Tagged:
    """The moving tags, the channel last; with `digest` (the push's), only while X.Y.Z is still what
    was pushed."""
    from triton_release.registry import publish

    return publish.tag_release(repository, version, revision, options.channel, digest)


def retain(registry: RegistryRepository, options: PublishOptions) -> Retention:
    """The newest `options.keep` releases kept, and every release a channel points at (run only
    when keep is set: unset, every release is kept)."""
    from triton_release.registry import publish

    assert options.keep is not None
    return publish.retain(registry, options.keep, options.channel)


def finish_interrupted(registry: RegistryRepository, options: PublishOptions) -> Finished:
    from triton_release.registry import publish

    return publish.finish_interrupted(registry, options.channel)


@dataclass(frozen=True)
class Committed:
    committed: bool
    tag: str
    commit: str
    version: str = ""

    def to_json(self) -> dict:
        return {"committed": self.committed, "tag": self.tag, "commit": self.commit}

    def facts(self) -> dict:
        return {"version": self.version} if self.version else {}


def commit(root: Path, version: str, bumped: BumpResult | None = None, revision: str | None = None) -> Committed:
    """Commit exactly the bumped version folders (N+1 new, N restored) as `release X.Y.Z`, nothing
    else the working tree or the index holds, and tag vX.Y.Z: that commit, or `revision` (the
    commit released) when there was nothing to commit."""
    git = Git(Git(root).toplevel())
    paths = bumped.folders if bumped is not None else []
    staged = False
    if paths:
        git.run("add", "--force", "--", *paths)  # exactly what git held, ignored patterns or not
        staged = git.run("diff", "--cached", "--quiet", "--", *paths, check=False).returncode != 0
    if staged:
        identity = []
        if git.run("config", "user.name", check=False).returncode != 0:
            identity = [
                "-c",
                "user.name=github-actions[bot]",
                "-c",
                "user.email=41898282+github-actions[bot]@users.noreply.github.com",
            ]
        git.run(*identity, "commit", "-q", "-m", f"release {version}", "--", *paths)
    tag = git_tag(version)
    target = git.text("rev-parse", "HEAD") if staged or not revision else revision
    if not git.has_commit(tag):
        git.run("tag", tag, target)
    elif git.text("rev-parse", f"{tag}^{{commit}}") != target:
        log.warning(f"git tag {tag} already exists on another commit; it was left as it is")
    return Committed(staged, tag, target, version)


def finish_commit(root: Path, repository: RegistryRepository) -> Committed | None:
    """The commit and git tag of the newest release, when the run that pushed it stopped before
    making them: its bump is redone from the commits in its labels (bump is deterministic), on
    the checkout of the commit it was built from. None when there is nothing to finish."""
    versions = releases.versions_in(repository.tags())
    if not versions:
        return None
    version = str(versions[-1])
    git = Git(Git(root).toplevel())
    if git.has_commit(git_tag(version)):
        return None
    labels = repository.image_config(version).get("config", {}).get("Labels") or {}
    revision, base = labels.get(REVISION_LABEL, ""), labels.get(BASE_LABEL, "")
    if not revision or git.text("rev-parse", "HEAD") != revision:
        log.warning(
            f"{repository}:{version} has no git tag {git_tag(version)}; it was built from "
            f"{revision[:12] or 'an unknown commit'}, not the checked-out commit, so its release commit is "
            "not made here"
        )
        return None
    released = f"{repository}:{version}"
    shipped = released_versions.parse(labels.get(RELEASED_VERSIONS_LABEL))
    planned = (
        changes(root, base or None, revision) if shipped is None else as_recorded(root, revision, shipped, released)
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


def _holds_shipped_bump(root: Path, planned: ChangesResult, released: str) -> bool:
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
    if _holds_shipped_bump(root, planned, released):
        bumped = BumpResult(planned.found.prefix, planned.bumps, carried=planned.carried)  # a stopped run's, untouched
    else:
        bumped = bump(root, planned) if planned.writes else None
    return commit(root, version, bumped, planned.found.head)
