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
- attributes change what `git archive` writes (export-subst, export-ignore).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from triton_release.history.bump import LFS_POINTER, FolderBump
from triton_release.history.changes import ChangeSet
from triton_release.history.git import Git


def differs(git: Git, changes: ChangeSet, bumps: list[FolderBump], root: Path) -> str | None:
    """Why the model repository `root` in the checkout is not the commit `changes.head` with
    `bumps` applied (they must be applied already), or None when it is, byte for byte."""
    if git.text("rev-parse", "HEAD") != changes.head:
        return "the checkout holds another commit"
    for key in ("core.fileMode", "core.symlinks"):
        if git.run("config", "--type=bool", key, check=False).stdout.strip() == b"false":
            return f"{key} is false"
    prefix = changes.prefix
    ours = tuple(PurePosixPath(prefix, b.model, str(v)).as_posix() + "/" for b in bumps
                 for v in (b.from_version, b.to_version))
    listed = git.run("ls-files", "-v", "-s", "-z", "--", prefix).stdout.decode("utf-8", "surrogateescape")
    for entry in filter(None, listed.split("\0")):
        tag, mode = entry[0], entry[2:].split(" ", 1)[0]
        if tag != "H" or mode == "160000":
            return f"git looks away from {entry.split(chr(9), 1)[-1]} (assume-unchanged, skip-worktree or a submodule)"
    status = git.run("status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=all", "--no-renames", "--",
                     prefix).stdout.decode("utf-8", "surrogateescape")
    for entry in filter(None, status.split("\0")):
        if not entry[3:].startswith(ours):
            return f"{entry[3:]} is not as committed"
    reason = _archive_attributes(git, changes.head)
    if reason:
        return reason
    return _folders_and_pointers(root)


def _archive_attributes(git: Git, head: str) -> str | None:
    """Attributes that make `git archive` write other bytes than the checkout holds."""
    names = git.run("ls-tree", "-r", "-z", "--name-only", head).stdout.decode("utf-8", "surrogateescape")
    files = [f for f in names.split("\0") if f == ".gitattributes" or f.endswith("/.gitattributes")]
    texts = [blob or b"" for blob in git.blobs(head, files).values()]
    common = Path(git.text("rev-parse", "--git-common-dir"))
    own = (common if common.is_absolute() else git.cwd / common) / "info" / "attributes"
    configured = git.run("config", "--path", "core.attributesFile", check=False).stdout.decode().strip()
    for path in filter(None, (own, Path(configured) if configured else None)):
        try:
            texts.append(path.read_bytes())
        except OSError:
            pass
    if any(b"export-" in text for text in texts):
        return "attributes set export-subst or export-ignore"
    return None


def _folders_and_pointers(root: Path) -> str | None:
    """A folder without any file, or a git LFS pointer where its object belongs."""
    for directory, folders, files in os.walk(root):
        if not folders and not files:
            return f"{directory} is an empty folder"
        for name in files:
            path = os.path.join(directory, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 1024:
                    continue
                with open(path, "rb") as handle:
                    if handle.read(len(LFS_POINTER)) == LFS_POINTER:
                        return f"{path} is a git LFS pointer"
            except OSError:
                return f"{path} cannot be read"
    return None
