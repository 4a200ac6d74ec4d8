"""Export: the commit's model repository with its bump, as the release builds and tests it (the
checkout itself when it is exactly that), and the check that it stayed so."""

from __future__ import annotations

import errno
from pathlib import Path

from triton_release.errors import Refused, no_space
from triton_release.history import worktree
from triton_release.history.bump import apply_bumps, extract_tree, fill_lfs_pointers
from triton_release.history.git import Git
from triton_release.history.planned import ChangesResult
from triton_release.history.worktree import Export


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
    why = worktree.differs(git, planned.found, planned.writes, shipped.root, again=True) or worktree.bumps_intact(
        planned.found, planned.writes, shipped.root
    )
    if why:
        raise Refused(
            f"The model repository changed while the release built and tested it in place ({why}): "
            "the image may hold bytes that are not commit "
            f"{planned.found.head[:12]}'s. Nothing was pushed. Leave the checkout alone and run again."
        )
