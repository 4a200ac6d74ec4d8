"""Validate, changed, bump: the change a release makes, its bump in the working tree (journaled,
and finished by `recover` after a killed run), and the export that is built and tested."""

from __future__ import annotations

import errno
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.contract import LEDGER_TAG, RELEASED_VERSIONS_LABEL, REVISION_LABEL, git_tag
from triton_release.errors import InfrastructureError, Refused, TritonReleaseError, UsageError, no_space
from triton_release.history import released_versions, releases, worktree
from triton_release.history.bump import (
    STAGING,
    Carried,
    FolderBump,
    Written,
    apply_bumps,
    changed_paths,
    check_working_tree,
    extract_tree,
    fill_lfs_pointers,
    folder_writes,
    holds_bump,
    plan_bumps,
    same_as_tree,
    undo_bumps,
)
from triton_release.history.changes import Changes, ChangeSet
from triton_release.history.git import Git
from triton_release.history.journal import Entry, Journal
from triton_release.models.validate import ValidationResult
from triton_release.models.validate import validate as validate_repository
from triton_release.processes import alive

if TYPE_CHECKING:
    from triton_release.registry.client import RegistryRepository
    from triton_release.registry.ledger import Ledger


# -- validate, changed, bump ------------------------------------------------------------------


def validate(root: Path, requirements_options: str = "refuse") -> ValidationResult:
    result = validate_repository(root, requirements_options)
    if not result.ok:  # the problems are listed by the step's result; the closing line counts them
        raise Refused(result.summary(), result=result)
    return result


@dataclass(frozen=True)
class VersionPlan:
    previous: str | None
    previous_from: str  # registry | git tag | none
    version: str | None  # None: nothing to release


@dataclass(frozen=True)
class ChangesResult:
    found: ChangeSet
    bumps: tuple[FolderBump, ...]
    kind: releases.ReleaseKind
    base_from: str
    plan: VersionPlan | None = None  # release only: the version the change makes
    carried: tuple[Carried, ...] = ()  # released versions written from the registry's record
    # release only: model -> version -> git tree of the image it builds (history/released_versions.py)
    record: Mapping[str, Mapping[int, str]] = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()  # how the base was found, where that needed saying (a fetch, a moved tag)

    @property
    def to_test(self) -> list[str]:
        return self.found.to_test

    @property
    def writes(self) -> list[Written]:
        """Every version folder the bump writes: the new versions, and the carried ones."""
        return [*self.bumps, *self.carried]

    def record_label(self) -> dict[str, str]:
        record = {m: dict(vs) for m, vs in self.record.items()}
        return {RELEASED_VERSIONS_LABEL: released_versions.label(record)} if self.record else {}

    def to_json(self) -> dict:
        data = {
            "base": self.found.base,
            "base_from": self.base_from,
            "head": self.found.head,
            "changes": self.found.to_json(),
            "bumps": [b.to_json() for b in self.bumps],
            "release": self.kind.to_json(),
            "carried": [c.to_json() for c in self.carried],
            "warnings": list(self.warnings),
        }
        if self.plan is not None:
            data.update(
                {
                    "previous_version": self.plan.previous,
                    "previous_from": self.plan.previous_from,
                    "version": self.plan.version,
                }
            )
        return data

    def facts(self) -> dict:
        facts: dict = {"changed_models": sorted(self.found.models)}
        if self.plan is not None:
            facts["version"] = self.plan.version
        return facts


def changes(
    root: Path, base: str | None, head: str = "HEAD", *, registry: RegistryRepository | None = None, plan: bool = False
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
    if not plan:
        bumps = plan_bumps(found)
        kind = releases.release_kind(found, {b.model for b in bumps})
        return ChangesResult(found, tuple(bumps), kind, base_from, warnings=warnings)
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
                f"{registry}:{newest} was released (the registry's ledger, {registry}:{LEDGER_TAG}, says so) "
                "and is gone from the registry: the next release is numbered after it, and every version it "
                "shipped is kept as it shipped it",
            )
            previous, source, where = newest, "the registry's ledger", f"{registry}:{LEDGER_TAG}"
        what = f"The registry's ledger {registry}:{LEDGER_TAG}"
        released_versions.prove(git, ledger.versions, [*ledger.releases.values(), found.head], found.prefix, what)
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
    return ChangesResult(found, tuple(bumps), kind, base_from, version_plan, tuple(carried), record, warnings)


def _ledger(registry: RegistryRepository | None) -> Ledger | None:
    """The registry's ledger of every release (registry/ledger.py); None without a registry."""
    if registry is None:
        return None
    from triton_release.registry.ledger import Ledger, read_ledger

    # its tag is listed with the releases': the tags are read first, and a registry without one is asked nothing more
    return read_ledger(registry) if LEDGER_TAG in registry.tags() else Ledger()


@dataclass(frozen=True)
class BumpResult:
    prefix: str
    bumps: tuple[FolderBump, ...]
    undone: bool = False
    carried: tuple[Carried, ...] = ()
    # the working tree held exactly this bump already (a `bump` of the user's, or what an earlier
    # run left): nothing was written, and nothing of it is undone by this run
    found: bool = False

    @property
    def written(self) -> bool:
        """Whether this run wrote folders into the working tree, which it undoes on failure."""
        return bool(self.bumps or self.carried) and not self.found and not self.undone

    def to_json(self) -> dict:
        return {
            "bumps": [b.to_json() for b in self.bumps],
            "carried": [c.to_json() for c in self.carried],
            "undone": self.undone,
            "found_in_working_tree": self.found,
        }

    @property
    def folders(self) -> list[str]:
        """Every version folder the bump wrote, as git names them."""
        writes: tuple[Written, ...] = (*self.bumps, *self.carried)
        return [f"{self.prefix}/{b.model}/{v}" for b in writes for v in b.folders()]


def bump(root: Path, planned: ChangesResult, release: str = "", *, held_is_ours: bool = False) -> BumpResult:
    """The next version folders in the working tree; refused before touching anything when the
    working tree holds anything but the commit there. Journaled under .git/ until the run undoes
    it or ends with it (`release`: the registry repository it is for), so that a killed run's bump
    is finished by the next (`recover`).

    A working tree that holds exactly this bump already (the same folders, byte for byte) is the
    bump found, not a refusal: the user's own `bump`, or one a run left whose journal is gone. It
    is left as found, whatever this run ends with; `held_is_ours` (the run that left it was
    killed, its journal unreadable) makes it this run's, undone like one it wrote."""
    found = planned.found
    if planned.writes and _holds(found, planned, root):
        if not held_is_ours:
            return BumpResult(found.prefix, planned.bumps, carried=planned.carried, found=True)
        git = Git(Git(root).toplevel())
        Journal(git).begin(found.head, found.prefix, folder_writes(git, found, planned.writes), release)
        return BumpResult(found.prefix, planned.bumps, carried=planned.carried)
    check_working_tree(found, planned.writes, root)
    if planned.writes:
        git = Git(Git(root).toplevel())
        journal = Journal(git)
        journal.begin(found.head, found.prefix, folder_writes(git, found, planned.writes), release)
        try:
            apply_bumps(found, planned.writes, root, git)  # all or nothing
        except BaseException:
            journal.end()
            raise
    return BumpResult(found.prefix, planned.bumps, carried=planned.carried)


def _holds(found: ChangeSet, planned: ChangesResult, root: Path) -> bool:
    """Whether the checkout of the commit released holds exactly the planned bump, a new folder
    among it (a tree untouched since its commit is no bump found)."""
    git = Git(Git(root).toplevel())
    fresh = [w for w in planned.writes if isinstance(w, FolderBump) or not w.at_head]
    if git.text("rev-parse", "HEAD") != found.head or not fresh:
        return False
    if not all(
        (root / w.model / str(w.to_version if isinstance(w, FolderBump) else w.version)).is_dir() for w in fresh
    ):
        return False
    return holds_bump(found, planned.writes, root)


def undo_bump(root: Path, planned: ChangesResult) -> BumpResult:
    undo_bumps(planned.found, planned.writes, root)
    journal_end(root)
    return BumpResult(planned.found.prefix, planned.bumps, undone=True, carried=planned.carried)


def journaled(root: Path) -> bool:
    """Whether a run left its journal in the git repository around `root`."""
    try:
        return Journal(Git(Git(root).toplevel())).path.exists()
    except TritonReleaseError:
        return False


def journal_phase(root: Path, phase: str, version: str = "") -> None:
    """How far the release got with its bump (history/journal.py)."""
    Journal(Git(Git(root).toplevel())).phase(phase, version)


def journal_end(root: Path) -> None:
    """The run ends with its bump, or without one: nothing for a next run to finish."""
    Journal(Git(Git(root).toplevel())).end()


@dataclass(frozen=True)
class Recovered:
    """What a run found of an earlier one that was killed with its bump in the working tree."""

    phase: str
    action: str  # undone | kept | tagged | gone | dropped (unreadable: its bump is known by content)
    folders: tuple[str, ...]
    owner: str

    def to_json(self) -> dict:
        return {"phase": self.phase, "action": self.action, "folders": list(self.folders), "owner": self.owner}


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
        _published_from(git, entry, repository)
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

    try:
        remove_orphans(docker_client(ping_timeout=5))
    except InfrastructureError:
        pass


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


def _published_from(git: Git, entry: Entry, repository: RegistryRepository | None) -> bool | None:
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
        tag = git_tag(entry.version)
        if not git.has_commit(tag):
            git.run("tag", tag, head)
        return "tagged"
    return "kept"


@dataclass(frozen=True)
class Export:
    """The model repository as the release ships it: the released commit's files, bumped."""

    root: Path
    commit: str
    uncommitted: tuple[str, ...]  # what the working tree holds besides: not released
    in_place: bool = False  # the checkout itself, which is exactly that (history/worktree.py)
    unpacked_because: str = ""  # why the checkout could not be used in place
    # in place: the git object id of each file outside the bumped folders, by absolute path
    blob_ids: Mapping[str, str] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        return {
            "commit": self.commit,
            "uncommitted_not_released": list(self.uncommitted),
            "in_place": self.in_place,
            **({"unpacked_because": self.unpacked_because} if self.unpacked_because else {}),
        }


def export(root: Path, planned: ChangesResult, dest: Path, *, bumped: bool = False) -> Export:
    """The commit's model repository with the bumps applied: what is built and tested, whatever
    the working tree holds (uncommitted edits are never shipped). The checkout itself when it is
    exactly that (`bumped`: the bump step applied the bumps to it); else unpacked under `dest`."""
    git = Git(Git(root).toplevel())
    found = planned.found
    why = "the version folders are bumped in the copy only"
    if bumped or not planned.writes:
        differs, blob_ids = worktree.in_place(git, found, planned.writes, Path(root))
        if not differs:
            return Export(Path(root), found.head, (), in_place=True, blob_ids=blob_ids)
        why = differs
    target = dest / "model_repository"
    try:
        extract_tree(git, found.head, found.prefix, target)
        apply_bumps(found, planned.writes, target, git)
        fill_lfs_pointers(git, target)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise no_space(dest, f"exporting commit {found.head[:12]} to build it") from None
    changed = git.run("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", found.prefix).stdout
    ours = worktree.bumped_folders(found.prefix, planned.writes)
    uncommitted = tuple(
        path
        for entry in changed.decode(errors="surrogateescape").split("\0")
        if len(entry) > 3
        if not (path := entry[3:]).startswith(ours)
    )
    if git.text("rev-parse", "HEAD") != found.head:
        uncommitted = ()  # the working tree is another commit: nothing of it is released
    return Export(target, found.head, uncommitted[:20], unpacked_because=why)


def still_in_place(shipped: Export, planned: ChangesResult) -> None:
    """Refuse when the checkout built in place changed while the release read it: the image
    would hold bytes that are not the commit's."""
    if not shipped.in_place:
        return
    git = Git(Git(shipped.root).toplevel())
    why = worktree.differs(git, planned.found, planned.writes, shipped.root) or worktree.bumps_intact(
        git, planned.found, planned.writes, shipped.root
    )
    if why:
        raise Refused(
            f"The model repository changed while the release built and tested it in place ({why}): "
            "the image may hold bytes that are not commit "
            f"{planned.found.head[:12]}'s. Nothing was pushed. Leave the checkout alone and run again."
        )
