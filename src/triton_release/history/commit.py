"""The release commit: exactly the bumped version folders committed as `release X.Y.Z`, and the
git tag vX.Y.Z made."""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from triton_release import contract
from triton_release.errors import Refused
from triton_release.history.blobs import blob_id
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
    staged, known = False, []
    if paths:
        known = _stage_known(git, bumped) if bumped is not None else []
        if not known:
            git.run(*STORE_BIG, "add", "--force", "--", *paths)  # exactly what git held, ignored patterns or not
            if bumped is not None:
                _stage_modes(git, bumped)
        if bumped is not None:
            _prove_staged(git, bumped, version, paths)
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
        listed = "".join(f"{path}\0" for path in known).encode("utf-8", "surrogateescape")
        if known:  # staged by their ids, which git's refresh of the index would hash again
            git.run("update-index", "-z", "--assume-unchanged", "--stdin", input=listed)
        try:
            git.run(*STORE_BIG, *identity, "commit", "-q", "-m", f"release {version}", *only)
        finally:
            if known:
                git.run("update-index", "-z", "--no-assume-unchanged", "--stdin", input=listed, check=False)
    tag = contract.git_tag(version)
    target = git.text("rev-parse", "HEAD") if staged or not revision else revision
    if not git.has_commit(tag):
        git.run("tag", tag, target)
    elif git.text("rev-parse", f"{tag}^{{commit}}") != target:
        log.warning(f"git tag {tag} already exists on another commit; it was left as it is")
    return Committed(staged, tag, target, version)


# The git commands that write the release commit's objects store a file over 1 MiB as it is, without
# looking for deltas (`git add` of 512 MiB of weights: seconds for bytes that do not compress); for
# these commands only. Every git command already deflates nothing (GIT_SETTINGS in history/git.py).
STORE_BIG = ("-c", "core.bigFileThreshold=1m")


def _stage_known(git: Git, bumped: BumpResult) -> list[str]:
    """Stage each folder the bump wrote as the git tree it wrote there, by the blob ids git holds
    already (`git update-index --index-info`), where the working tree is proven to hold exactly
    those files: the same names, each a regular file with the tree's executable bit (unless
    core.fileMode is false, when the tree's modes are staged) whose bytes are its blob (its id
    hashed once a run, history/blobs.py). `git add` would hash and store gigabytes of weights git
    has. The files staged, as git names them; [] where that is not so (a write since, a link, an
    LFS object the bump filled in, anything else): then `git add` stages them and `_prove_staged`
    names what changed."""
    folders = {PurePosixPath(bumped.prefix, w.model, str(w.version)).as_posix(): w.tree for w in bumped.trees}
    if not folders or set(folders) != set(bumped.folders):
        return []
    modes = git.run("config", "--bool", "core.fileMode", check=False).stdout.strip() != b"false"
    lines: list[str] = []
    for folder, tree in folders.items():
        expected: dict[str, tuple[str, str]] = {}
        for entry in filter(
            None, git.run("ls-tree", "-r", "-z", tree).stdout.decode("utf-8", "surrogateescape").split("\0")
        ):
            meta, path = entry.split("\t", 1)
            mode, kind, oid = meta.split()
            if kind != "blob" or mode not in ("100644", "100755"):
                return []
            expected[path] = (mode, oid)
        top = git.cwd / folder
        found: dict[str, os.stat_result] = {}
        for directory, names, files in os.walk(top):
            for name in names + files:
                full = os.path.join(directory, name)
                info = os.lstat(full)
                if stat.S_ISDIR(info.st_mode) and name != ".git":
                    continue
                if not stat.S_ISREG(info.st_mode):
                    return []
                found[PurePosixPath(os.path.relpath(full, top)).as_posix()] = info
        if found.keys() != expected.keys():
            return []
        for path, (mode, oid) in sorted(expected.items()):
            if modes and bool(found[path].st_mode & 0o100) != (mode == "100755"):
                return []
            if blob_id(os.fspath(top / path), oid) != oid:
                return []
            lines.append(f"{mode} {oid}\t{folder}/{path}")
    held = git.run("--literal-pathspecs", "ls-files", "-z", "--", *folders).stdout.decode("utf-8", "surrogateescape")
    zero = "0" * len(lines[0].split()[1]) if lines else "0" * 40
    removed = [f"0 {zero}\t{path}" for path in filter(None, held.split("\0"))]
    listed = "".join(f"{line}\0" for line in (*removed, *lines)).encode("utf-8", "surrogateescape")
    git.run("update-index", "-z", "--index-info", input=listed)
    return [line.split("\t", 1)[1] for line in lines]


def _stage_modes(git: Git, bumped: BumpResult) -> None:
    """With `core.fileMode` false (Windows, WSL, some CI), `git add` stages every new file as
    100644: the new version folders get the modes the image holds (their trees' in git), each
    executable bit set or cleared in the index (`git update-index --chmod`)."""
    if git.run("config", "--bool", "core.fileMode", check=False).stdout.strip() != b"false":
        return
    trees = [
        (b.new_tree or f"HEAD:{bumped.prefix}/{b.model}/{b.from_version}", f"{bumped.prefix}/{b.model}/{b.to_version}")
        for b in bumped.bumps
    ]
    trees += [(c.tree, f"{bumped.prefix}/{c.model}/{c.version}") for c in bumped.carried]
    modes: dict[str, list[str]] = {"+x": [], "-x": []}
    for tree, folder in trees:
        for entry in filter(
            None, git.run("ls-tree", "-r", "-z", tree).stdout.decode("utf-8", "surrogateescape").split("\0")
        ):
            meta, path = entry.split("\t", 1)
            mode = meta.split()[0]
            if mode in ("100755", "100644"):
                modes["+x" if mode == "100755" else "-x"].append(PurePosixPath(folder, path).as_posix())
    for change, files in modes.items():
        if files:
            git.run("--literal-pathspecs", "update-index", f"--chmod={change}", "--", *files)


def _prove_staged(git: Git, bumped: BumpResult, version: str, paths: list[str]) -> None:
    """Each folder the bump wrote, as `git add` staged it, must be exactly the git tree the bump
    wrote there (what the image was built from): a process that held a file of N open, or a hard
    link to one, may have written into it since (the bump moves N to N+1), and the commit and the
    tag vX.Y.Z would hold bytes other than the image's. Refused before either is made, the folders
    unstaged again, naming each file that changed."""
    changed: list[str] = []
    for write in bumped.trees:
        folder = PurePosixPath(bumped.prefix, write.model, str(write.version)).as_posix()
        staged = git.run("write-tree", f"--prefix={folder}/", check=False)
        tree = staged.stdout.decode().strip() if staged.returncode == 0 else ""
        if tree == write.tree:
            continue
        if not tree:
            changed.append(f"{folder} (gone)")
            continue
        listed = git.run("diff-tree", "-r", "-z", "--no-renames", "--name-status", write.tree, tree).stdout
        fields = listed.decode("utf-8", "surrogateescape").split("\0")
        words = {"M": "changed", "A": "added", "D": "removed", "T": "changed kind"}
        changed += [
            f"{folder}/{path} ({words.get(status[:1], 'changed')})"
            for status, path in zip(fields[::2], fields[1::2])
            if status
        ] or [f"{folder} (its modes)"]
    if not changed:
        return
    git.run("reset", "-q", "--", *paths, check=False)  # the index as it was before `git add`
    listed = "; ".join(changed[:5]) + (f"; and {len(changed) - 5} more" if len(changed) > 5 else "")
    at_head = [p for p in paths if git.run("cat-file", "-e", f"HEAD:{p}", check=False).returncode == 0]
    new = [p for p in paths if p not in at_head]
    restore = " and ".join(
        part
        for part in (
            f"`git checkout HEAD -- {' '.join(at_head)}`" if at_head else "",
            f"remove {', '.join(new)}" if new else "",
        )
        if part
    )
    raise Refused(f"""
        The version folders of release {version} changed after the image was built from them: {listed}.
        Something wrote there during the release (a process holding a file of the version folder open, an
        editor, a training job, or a hard link to one), and the release commit would hold other bytes than
        the image. No release commit and no git tag {contract.git_tag(version)} were made; {version} is
        in the registry as built and tested. Stop whatever writes there, move your edit out of the version
        folders (it belongs in a new version), put them back as committed ({restore}), and run
        triton-release again: it redoes the bump {version} shipped and makes the commit and the tag.""")


# an operation git has under way, by the file or folder it keeps in .git/ meanwhile: (what it is,
# the command that finishes it, the one that abandons it)
PENDING = (
    ("MERGE_HEAD", "a merge", "git commit", "git merge --abort"),
    ("CHERRY_PICK_HEAD", "a cherry-pick", "git cherry-pick --continue", "git cherry-pick --abort"),
    ("REVERT_HEAD", "a revert", "git revert --continue", "git revert --abort"),
    ("rebase-merge", "a rebase", "git rebase --continue", "git rebase --abort"),
    ("rebase-apply", "a rebase or `git am`", "git rebase --continue (or git am --continue)", "git rebase --abort"),
)


def pending_operation(git: Git) -> tuple[str, str, str] | None:
    """The merge, cherry-pick, revert, rebase or `git am` under way in the checkout: (what it is,
    how to finish it, how to abandon it); None when there is none."""
    found = git.text("rev-parse", *(arg for name, *_ in PENDING for arg in ("--git-path", name))).splitlines()
    for path, (_, what, finish, abandon) in zip(found, PENDING):
        if os.path.lexists(os.path.join(git.cwd, path)):
            return what, finish, abandon
    return None


def refuse_pending(root: Path) -> None:
    """`commit` set in a checkout where git has a merge, cherry-pick, revert or rebase under way:
    refused before anything is bumped, built or pushed, since the release commit could not be made
    (git refuses a partial commit then) once the image is out."""
    git = Git(Git(root).toplevel())
    pending = pending_operation(git)
    if pending is None:
        return
    what, finish, abandon = pending
    raise Refused(f"""
        {git.cwd} has {what} under way, and this release is asked to commit its bump (commit: true, --commit),
        which git cannot do during {what}. Finish it ({finish}) or abandon it ({abandon}), then run again;
        or release without committing. Nothing was bumped, built or pushed.""")


def _index_is_only(git: Git, paths: list[str]) -> bool:
    """Whether the index differs from HEAD in `paths` alone (submodules included, whatever the
    config ignores) and no merge, cherry-pick or revert is under way: then a plain `git commit`
    commits exactly those folders as `git add` staged them, where `git commit -- paths` would
    read and hash them once more."""
    if pending_operation(git) is not None:
        return False
    staged = git.run("diff-index", "--cached", "--name-only", "-z", "--no-renames", "--ignore-submodules=none", "HEAD")
    inside = tuple(f"{PurePosixPath(path).as_posix()}/".encode("utf-8", "surrogateescape") for path in paths)
    return all(not name or name.startswith(inside) for name in staged.stdout.split(b"\0"))
