"""Recover: what a killed run left with its bump in the working tree, finished (undone, kept or
tagged) after asking the registry whether it was published; the server it left removed."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release import contract
from triton_release.contract import REVISION_LABEL
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history.bump import STAGING, Written, changed_paths, same_as_tree, undo_bumps
from triton_release.history.changes import ChangeSet
from triton_release.history.git import Git
from triton_release.history.journal import Entry, Journal, Recovered
from triton_release.processes import alive

if TYPE_CHECKING:
    from triton_release.registry.client import RegistryRepository


def recover(root: Path, repository: RegistryRepository | None) -> Recovered | None:
    """Finish what a killed run left (its journal, history/journal.py): a bump never published is
    undone; one published is kept for its commit; a release commit left without its tag is tagged,
    and git's stale index.lock removed. None when no run was stopped; refused while it still runs."""
    git = Git(Git(root).toplevel())
    journal = Journal(git)
    entry = journal.read()
    if entry is None:
        # unreadable: dropped; the bump it described is known by its contents (`bump`)
        return Recovered("unknown", "dropped", (), "unknown") if journal.dropped else None
    who = f"pid {entry.owner.get('pid')} on {entry.owner.get('host')}"
    if alive(entry.owner, elsewhere=False):
        raise UsageError(f"""
            Another triton-release run ({who}) is bumping this checkout ({journal.path} says so). Wait
            for it to end, or stop it; a run that was killed is recognised and finished by the next.""")
    _remove_orphaned_servers()
    found = ChangeSet(None, entry.head, entry.prefix)
    folders = tuple(f"{entry.prefix}/{w.model}/{w.version}" for w in entry.writes)
    published_now = (
        _published_from(entry, repository)
        if entry.phase in ("pushing", "committing") and entry.release and entry.version
        else False
    )
    if published_now is None:
        raise InfrastructureError(f"""
            A run ({who}) was stopped {"while pushing" if entry.phase == "pushing" else "after pushing"}
            {entry.release}:{entry.version}, and the registry does not answer whether it is there; its bump
            stays in {", ".join(folders)}. Run again when the registry answers.""")
    if entry.phase == "committing" and (published_now or not entry.release):
        action = _finish_release_commit(git, entry)
        journal.end()
        return Recovered(entry.phase, action, folders, who)
    if entry.phase == "pushing" and published_now:
        journal.end()
        return Recovered(entry.phase, "kept", folders, who)
    # never published, or published and gone since (the registry wiped): nothing of it is out
    if git.text("rev-parse", "HEAD") != entry.head:
        if not changed_paths(git, list(folders)):  # a checkout since (actions/checkout cleans): nothing left
            journal.end()
            return Recovered(entry.phase, "gone", folders, who)
        raise Refused(f"""
            A run ({who}) was stopped with its bump of commit {entry.head[:12]} in {", ".join(folders)}, and
            {git.text("rev-parse", "--short", "HEAD")} is checked out now. Check {entry.head[:12]} out and run
            again (the bump is undone), or remove {journal.path} after restoring those folders by hand.""")
    undo_bumps(found, _undoable(git, entry, root), root)
    journal.end()
    return Recovered(entry.phase, "undone", folders, who)


def _remove_orphaned_servers() -> None:
    """The server a killed run left (server/container.py), before the rerun's own; no daemon, no servers."""
    from triton_release.image.engine import docker_client
    from triton_release.server.container import remove_orphans

    with contextlib.suppress(InfrastructureError):
        remove_orphans(docker_client(ping_timeout=5))


def _undoable(git: Git, entry: Entry, root: Path) -> list[Written]:
    """The killed run's writes, each checked to hold what it wrote, what git holds, or nothing
    (a kill mid-bump): refused before anything is undone when someone changed one since."""
    for write in entry.writes:
        folder = root / write.model / str(write.version)
        for stale in (root / write.model).glob(".triton-release-*"):
            if STAGING.match(stale.name):
                shutil.rmtree(stale, ignore_errors=True)  # a staging folder of the killed run
        ours = not folder.exists() or same_as_tree(git, write.tree, folder)
        head = write.at_head and git.run(
            "rev-parse", "-q", "--verify", f"{entry.head}:{entry.prefix}/{write.model}/{write.version}", check=False
        )
        if not ours and not (head and head.returncode == 0 and same_as_tree(git, head.stdout.decode().strip(), folder)):
            raise Refused(f"""
                {entry.prefix}/{write.model}/{write.version} changed after a run that bumped it was killed:
                it holds neither what that run wrote nor what git holds. Commit it or move it away, then run
                again: the rest of the bump is undone then.""")
    return list(entry.carried())


def _published_from(entry: Entry, repository: RegistryRepository | None) -> bool | None:
    """Whether the killed run's X.Y.Z went up, built from its commit; None when the registry
    does not answer."""
    from triton_release.registry import publish
    from triton_release.registry.client import RegistryRepository

    registry = (
        repository
        if repository is not None and str(repository) == entry.release
        else RegistryRepository.parse(entry.release)
    )
    try:
        if publish.published(registry, entry.version) is not True:
            return publish.published(registry, entry.version)
        labels = registry.image_config(entry.version).get("config", {}).get("Labels") or {}
    except InfrastructureError:
        return None
    return labels.get(REVISION_LABEL) == entry.head


def _finish_release_commit(git: Git, entry: Entry) -> str:
    """A run killed inside `git commit` leaves git's index.lock; one killed before `git tag`, the
    commit without its tag. Both are finished here; a commit never made is left to be made by
    the next --commit (its bump stays, published)."""
    lock = Path(git.text("rev-parse", "--git-dir"))
    lock = (lock if lock.is_absolute() else git.cwd / lock) / "index.lock"
    lock.unlink(missing_ok=True)  # its writer is dead: the journal's owner was committing
    head = git.text("rev-parse", "HEAD")
    subject = git.text("log", "-1", "--format=%s")
    parent = git.run("rev-parse", "-q", "--verify", "HEAD^", check=False).stdout.decode().strip()
    if entry.version and subject == f"release {entry.version}" and parent == entry.head:
        tag = contract.git_tag(entry.version)
        if not git.has_commit(tag):
            git.run("tag", tag, head)
        return "tagged"
    return "kept"
