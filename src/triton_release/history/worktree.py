"""Whether the checkout's model repository is exactly what a release ships, so that it is built
and tested in place instead of unpacked again.

Unpacking a commit writes every model's folders: at a thousand models that is thousands of
folders, seconds on a runner's disk, for models that did not change. A fresh checkout in CI
holds exactly the commit, and after the bump exactly the commit with its new version folders:
then the release reads the checkout itself. Anything that could make the checkout differ from
what `git archive` gives refuses the shortcut, and the release unpacks the commit as before:
- HEAD is another commit, or git is told to look away (assume-unchanged, skip-worktree, core.fileMode
  or core.symlinks off, a submodule);
- a file differs from the commit, or is there untracked or ignored, outside the bumped folders;
- a folder holds no file (git keeps none, so the commit has none);
- a file is a git LFS pointer, not its object (the unpacked commit gets the object);
- attributes or settings under which checkout and `git archive` may write other bytes
  (export-subst, export-ignore, text, eol, filter, ident, core.autocrlf, core.ignoreCase).
git status is asked without the shortcuts a user's config may allow (ctime, fsmonitor). Once it
finds the checkout clean, each committed file outside the bumped folders holds its blob: the
build names such a file by the blob's id rather than reading it again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from triton_release.history.bump import Written, folder_writes, holds_bump, lfs_pointer
from triton_release.history.changes import ChangeSet
from triton_release.history.git import CONVERTING, Git


def differs(git: Git, changes: ChangeSet, bumps: list[Written], root: Path, *, again: bool = False) -> str | None:
    """Why the model repository `root` in the checkout is not the commit `changes.head` with
    `bumps` applied (they must be applied already), or None when it is, byte for byte. `again`:
    `in_place` found it so before, in this run (see there)."""
    return in_place(git, changes, bumps, root, again=again)[0]


def in_place(
    git: Git, changes: ChangeSet, bumps: list[Written], root: Path, *, again: bool = False
) -> tuple[str | None, dict[str, str]]:
    """`differs`, and when the checkout is the commit, the git object id of each committed file
    outside the bumped folders, by its absolute path under `root`: git status found it holds
    exactly that blob, so a build can name it by the id instead of reading it (links excluded:
    their id is the link's text, not the content a tar reads through); and of the files the bumps
    wrote (`_bumped_blob_ids`). `again`: this found the checkout to be the commit before, in this
    run; what the commit alone decides (its own .gitattributes files) is not asked again. LFS
    pointers are looked for again: git status leaves the bumped folders out."""
    if git.text("rev-parse", "HEAD") != changes.head:
        return "the checkout holds another commit", {}
    for key, refused in (("core.fileMode", b"false"), ("core.symlinks", b"false"), ("core.ignoreCase", b"true")):
        if git.run("config", "--type=bool", key, check=False).stdout.strip() == refused:
            return f"{key} is {refused.decode()}", {}
    if git.run("config", "core.autocrlf", check=False).stdout.strip().lower() == b"input" or (
        git.run("config", "--type=bool", "core.autocrlf", check=False).stdout.strip() == b"true"
    ):
        return "core.autocrlf converts line endings", {}
    prefix = changes.prefix
    ours = bumped_folders(prefix, bumps)
    listed = git.run("ls-files", "-v", "-s", "-z", "--", prefix).stdout.decode("utf-8", "surrogateescape")
    tracked, blob_ids = [], {}
    top, under = os.path.abspath(root), "" if prefix == "." else prefix + "/"
    for entry in filter(None, listed.split("\0")):
        (tag, mode, rest), path = entry.split(" ", 2), entry.split("\t", 1)[1]
        if tag != "H" or mode == "160000":
            return f"git looks away from {path} (assume-unchanged, skip-worktree or a submodule)", {}
        tracked.append(path)
        if mode != "120000" and path.startswith(under) and not path.startswith(ours):
            blob_ids[os.path.join(top, path[len(under) :])] = rest.split(" ", 1)[0]
    status = git.run(  # the bumped folders left out: git would hash a restored N's weights to say it differs
        *STRICT,
        "status",
        "--porcelain=v1",
        "-z",
        "--ignored",
        "--untracked-files=all",
        "--no-renames",
        "--",
        prefix,
        *(f":(exclude,literal){folder}" for folder in ours),
    ).stdout.decode("utf-8", "surrogateescape")
    for entry in filter(None, status.split("\0")):
        if not entry[3:].startswith(ours):
            return f"{entry[3:]} is not as committed", {}
    reason = _archive_attributes(git, changes.head, tracked, committed=not again) or _folders_and_pointers(root)
    if not reason and git.text("rev-parse", "HEAD") != changes.head:  # a commit or checkout meanwhile
        reason = "the checkout moved to another commit while it was read"
    return reason, {} if reason else {**blob_ids, **_bumped_blob_ids(git, changes, bumps, top)}


def _bumped_blob_ids(git: Git, changes: ChangeSet, bumps: list[Written], top: str) -> dict[str, str]:
    """The git object id of each file the bumps wrote, from the tree written there, by absolute
    path: the bump wrote those blobs (or moved the checkout's clean folder that holds them), and
    the build checks each id as it reads the file for a tar, and still_in_place every bumped
    folder before the push. A blob of up to 1 KiB is left out (a git LFS pointer the bump may
    have filled in), as are links: those are read."""
    found: dict[str, str] = {}
    for write in folder_writes(git, changes, bumps):
        listed = git.run("ls-tree", "-r", "-l", "-z", write.tree).stdout.decode("utf-8", "surrogateescape")
        for entry in filter(None, listed.split("\0")):
            meta, path = entry.split("\t", 1)
            mode, kind, oid, size = meta.split()
            if kind == "blob" and mode != "120000" and int(size) > 1024:
                found[os.path.join(top, write.model, str(write.version), path)] = oid
    return found


def bumped_folders(prefix: str, bumps: list[Written]) -> tuple[str, ...]:
    """The folders a bump rewrites (N and N+1 of each model, and the carried versions), as git
    names them, each ending in /."""
    return tuple(PurePosixPath(prefix, b.model, str(v)).as_posix() + "/" for b in bumps for v in b.folders())


def bumps_intact(changes: ChangeSet, bumps: list[Written], root: Path) -> str | None:
    """Why the bumped folders no longer hold what the bump wrote (`differs` lets them differ from
    HEAD), or None."""
    return None if not bumps or holds_bump(changes, bumps, root) else "a bumped version folder changed"


# git status trusts the index's file times where the user's config says so: not here
STRICT = (
    "-c",
    "core.trustctime=true",
    "-c",
    "core.checkStat=default",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
)


def _archive_attributes(git: Git, head: str, tracked: list[str], *, committed: bool = True) -> str | None:
    """Attributes that make `git archive` write other bytes than the checkout holds, or convert
    them at all: those the checkout sees (every attributes file git reads), and (`committed`)
    those in the commit's own .gitattributes files."""
    converted = git.converting(tracked)
    if converted or not committed:
        return converted
    names = git.run("ls-tree", "-r", "-z", "--name-only", head).stdout.decode("utf-8", "surrogateescape")
    files = [f for f in names.split("\0") if f == ".gitattributes" or f.endswith("/.gitattributes")]
    for path, text in git.blobs(head, files).items():
        if text and _sets_converting(text):
            return f"{path} sets attributes that convert files"
    return None


def _sets_converting(text: bytes) -> bool:
    """Whether a .gitattributes text sets (or gives a value to) one of CONVERTING; `-text` and
    `!text` turn conversion off, and macros such as `binary` only do that."""
    for line in text.decode("utf-8", "replace").splitlines():
        tokens = line.split()
        if not tokens or tokens[0].startswith("#"):
            continue
        for token in tokens[1:]:
            if token.split("=", 1)[0] in CONVERTING:
                return True
    return False


def _folders_and_pointers(root: Path) -> str | None:
    """A folder without any file, anything but files, folders and links, or a git LFS pointer
    where its object belongs. Each entry's kind from scandir, without a stat."""
    top = os.fspath(root)
    folders = [top]
    while folders:
        directory = folders.pop()
        try:
            with os.scandir(directory) as listed:
                entries = [e for e in listed if not (directory == top and e.name == ".git" and e.is_dir())]
        except OSError:
            return f"{directory} cannot be read"
        if not entries:
            return f"{directory} is an empty folder"
        for entry in sorted(entries, key=lambda e: e.name, reverse=True):
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif not entry.is_file(follow_symlinks=False):
                    return f"{entry.path} is neither a file nor a folder"
                elif entry.stat(follow_symlinks=False).st_size <= 1024 and lfs_pointer(entry.path) is not None:
                    return f"{entry.path} is a git LFS pointer"
            except OSError:
                return f"{entry.path} cannot be read"
    return None


@dataclass(frozen=True)
class Export:
    """The model repository as the release ships it: the released commit's files, bumped."""

    root: Path
    commit: str
    uncommitted: tuple[str, ...]  # what the working tree holds besides: not released
    in_place: bool = False  # the checkout itself, which is exactly that (history/worktree.py)
    unpacked_because: str = ""  # why the checkout could not be used in place
    # in place: the git object id of each file, by absolute path (worktree.in_place)
    blob_ids: Mapping[str, str] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        return {
            "commit": self.commit,
            "uncommitted_not_released": list(self.uncommitted),
            "in_place": self.in_place,
            **({"unpacked_because": self.unpacked_because} if self.unpacked_because else {}),
        }
