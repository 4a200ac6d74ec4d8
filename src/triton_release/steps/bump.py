"""Bump and its undo: the next version folders written into the working tree, journaled under
.git/ until the run undoes them or ends with them (history/journal.py)."""

from __future__ import annotations

from pathlib import Path

from triton_release.history.bump import (
    BumpResult,
    FolderBump,
    apply_bumps,
    check_working_tree,
    folder_writes,
    holds_bump,
    undo_bumps,
)
from triton_release.history.changes import ChangeSet
from triton_release.history.git import Git
from triton_release.history.journal import Journal
from triton_release.history.planned import ChangesResult


def bump(root: Path, planned: ChangesResult, *, release: str = "", held_is_ours: bool = False) -> BumpResult:
    """The next version folders in the working tree; refused before touching anything when the
    working tree holds anything but the commit there. Journaled under .git/ until the run undoes
    it or ends with it (`release`: the registry repository it is for), so that a killed run's bump
    is finished by the next (`recover`).

    A working tree that holds exactly this bump already (the same folders, byte for byte) is the
    bump found, not a refusal: the user's own `bump`, or one a run left whose journal is gone. It
    is left as found, whatever this run ends with; `held_is_ours` (the run that left it was
    killed, its journal unreadable) makes it this run's, undone like one it wrote."""
    found = planned.found
    git = Git(Git(root).toplevel())
    trees = tuple(folder_writes(git, found, planned.writes)) if planned.writes else ()
    if planned.writes and _holds(found, planned, root):
        if not held_is_ours:
            return BumpResult(found.prefix, planned.bumps, carried=planned.carried, found=True, trees=trees)
        Journal(git).begin(found.head, found.prefix, list(trees), release)
        return BumpResult(found.prefix, planned.bumps, carried=planned.carried, trees=trees)
    check_working_tree(found, planned.writes, root)
    if planned.writes:
        journal = Journal(git)
        journal.begin(found.head, found.prefix, list(trees), release)
        try:
            apply_bumps(found, planned.writes, root, git)  # all or nothing
        except BaseException:
            journal.end()
            raise
    return BumpResult(found.prefix, planned.bumps, carried=planned.carried, trees=trees)


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
    Journal.around(root).end()
    return BumpResult(planned.found.prefix, planned.bumps, undone=True, carried=planned.carried)
