"""The release commit: exactly the bumped version folders committed as `release X.Y.Z`, and the
git tag vX.Y.Z made."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from triton_release import contract
from triton_release.history.bump import BumpResult
from triton_release.history.git import Git

log = logging.getLogger("triton_release")


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
        only = () if _index_is_only(git, paths) else ("--", *paths)
        git.run(*identity, "commit", "-q", "-m", f"release {version}", *only)
    tag = contract.git_tag(version)
    target = git.text("rev-parse", "HEAD") if staged or not revision else revision
    if not git.has_commit(tag):
        git.run("tag", tag, target)
    elif git.text("rev-parse", f"{tag}^{{commit}}") != target:
        log.warning(f"git tag {tag} already exists on another commit; it was left as it is")
    return Committed(staged, tag, target, version)


def _index_is_only(git: Git, paths: list[str]) -> bool:
    """Whether the index differs from HEAD in `paths` alone (submodules included, whatever the
    config ignores) and no merge, cherry-pick or revert is under way: then a plain `git commit`
    commits exactly those folders as `git add` staged them, where `git commit -- paths` would
    read and hash them once more."""
    pending = git.text(
        "rev-parse", "--git-path", "MERGE_HEAD", "--git-path", "CHERRY_PICK_HEAD", "--git-path", "REVERT_HEAD"
    )
    if any(os.path.lexists(os.path.join(git.cwd, path)) for path in pending.splitlines()):
        return False
    staged = git.run("diff-index", "--cached", "--name-only", "-z", "--no-renames", "--ignore-submodules=none", "HEAD")
    inside = tuple(f"{PurePosixPath(path).as_posix()}/".encode("utf-8", "surrogateescape") for path in paths)
    return all(not name or name.startswith(inside) for name in staged.stdout.split(b"\0"))
