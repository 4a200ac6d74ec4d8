"""Version folders: bump N -> N+1 with the head contents, N restored to its released contents."""

from __future__ import annotations

import errno
import filecmp
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from triton_release.history.changes import ChangeSet, refuse_released_edits
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history.git import Git


@dataclass(frozen=True)
class FolderBump:
    model: str
    from_version: int
    to_version: int

    def to_json(self) -> dict:
        return {"model": self.model, "from": self.from_version, "to": self.to_version}


def plan_bumps(changes: ChangeSet) -> list[FolderBump]:
    """Which models get a new version folder. Refuses edits to released versions."""
    refuse_released_edits(changes)
    bumps = []
    for change in changes.models.values():
        if change.status == "modified" and change.edited_versions and not change.added_versions:
            highest = change.highest_base
            bumps.append(FolderBump(change.name, highest, highest + 1))
    return sorted(bumps, key=lambda b: b.model)


def extract_tree(git: Git, ref: str, strip: str, dest: Path) -> None:
    """Unpack the files under `strip` at `ref` into `dest` (nothing outside it), streamed from
    `git archive` into `tar` (thousands of small files in a fraction of Python's time; a large
    weights file never sits in memory). Git stores no `..` and no absolute path; links are
    unpacked as links, and the layers refuse one that leaves the repository."""
    dest.mkdir(parents=True)
    strip = PurePosixPath(strip).as_posix()  # "./a/1" -> "a/1"; "." is the whole tree
    depth = 0 if strip == "." else len(PurePosixPath(strip).parts)
    with git.archive_stream(ref, strip) as stream:
        try:
            done = subprocess.run(["tar", "-x", "-f", "-", "-C", str(dest), f"--strip-components={depth}",
                                   "--no-same-owner", "--no-same-permissions"],
                                  stdin=stream, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except FileNotFoundError:
            raise InfrastructureError("tar is not installed: install it (apt-get install tar).") from None
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        if "No space left" in why:
            raise OSError(errno.ENOSPC, why)
        raise InfrastructureError(f"unpacking {strip} at {ref[:12]} failed: {why}")


STAGING = re.compile(r"^\.triton-release-[0-9a-f]{8}$")  # our own staging folders, by name


def _status(git: Git, paths: list[str]) -> list[tuple[str, str]]:
    """(state, path) of every file under `paths` that differs from HEAD: modified, untracked, ignored."""
    out = git.run("status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=all", "--", *paths).stdout
    fields = out.decode("utf-8", errors="surrogateescape").split("\0")
    found, i = [], 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            i += 1  # the rename's source path follows
        state = {"??": "not tracked by git", "!!": "ignored by git"}.get(code, "changed and not committed")
        found.append((state, path))
    return found


def check_working_tree(changes: ChangeSet, bumps: list[FolderBump], model_repository: Path) -> None:
    """Bump replaces version folder N of the working tree with what git holds: refuse, before
    touching anything, when the working tree holds anything else there (an ignored weights file,
    an uncommitted edit, a submodule), or when the commit released is not the one checked out."""
    if not bumps:
        return
    git = Git(Git(Path(model_repository)).toplevel())
    if git.text("rev-parse", "HEAD") != changes.head:
        raise Refused(f"""
            The version folders are bumped in the working tree, which holds {git.text("rev-parse", "--short",
            "HEAD")}, not the commit released ({changes.head[:12]}). Check that commit out first (git checkout
            {changes.head[:12]}), or release HEAD.""")
    paths = [f"{changes.prefix}/{b.model}/{b.from_version}" for b in bumps]
    tree = git.run("ls-tree", "-r", "-z", changes.head, "--", *paths).stdout.decode(errors="surrogateescape")
    found = [("a git submodule", entry.split("\t", 1)[1]) for entry in tree.split("\0")
             if entry and entry.split()[1] == "commit"]
    found += _status(git, paths)
    if found:
        listed = "; ".join(f"{path} ({state})" for state, path in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise Refused(f"""
            Bumping would replace {', '.join(paths)} with the committed contents, and the working tree holds
            more there: {listed}{more}. Commit them (large weights: git LFS), or move them out of the
            version folder, then run again. Nothing was changed.""")


def apply_bumps(changes: ChangeSet, bumps: list[FolderBump], model_repository: Path, git: Git | None = None) -> None:
    """Write N+1 with the head contents and restore N to its base contents, for every bump.

    All-or-nothing: every folder is first staged beside its model, then swapped in by renames;
    a failure (or a signal) undoes the swaps done so far and removes the staging. `git`: the
    repository holding the commits, when `model_repository` is an export outside it.
    """
    root = Path(model_repository)
    git = git or Git(Git(root).toplevel())
    for bump in bumps:
        for stale in (root / bump.model).glob(".triton-release-*"):
            if STAGING.match(stale.name):  # left by a run that was killed: ours, by name
                shutil.rmtree(stale, ignore_errors=True)
    for bump in bumps:
        target = root / bump.model / str(bump.to_version)
        if target.exists():
            raise Refused(f"""
                {changes.prefix}/{bump.model}/{bump.to_version} already exists in the working tree but not
                at head: commit it, or remove it, and run again.""")
    staging = []
    try:
        for bump in bumps:
            stage = root / bump.model / f".triton-release-{uuid.uuid4().hex[:8]}"
            staging.append(stage)
            path = f"{changes.prefix}/{bump.model}/{bump.from_version}"
            extract_tree(git, changes.head, path, stage / "new")
            extract_tree(git, changes.base, path, stage / "old")
            fill_lfs_pointers(git, stage, required=False)  # the working tree keeps real files where it can
    except OSError as exc:
        for stage in staging:
            shutil.rmtree(stage, ignore_errors=True)
        if exc.errno != errno.ENOSPC:
            raise
        raise InfrastructureError(f"""
            No space left while writing the new version folders under {root} ({exc.strerror}); nothing was
            changed. Free some space and run again.""") from None
    except BaseException:
        for stage in staging:
            shutil.rmtree(stage, ignore_errors=True)
        raise
    done: list[tuple[Path, Path]] = []  # (from, to) renames, for undoing
    try:
        for bump, stage in zip(bumps, staging):
            current = root / bump.model / str(bump.from_version)
            for src, dst in ((current, stage / "head"), (stage / "old", current),
                             (stage / "new", root / bump.model / str(bump.to_version))):
                os.rename(src, dst)
                done.append((src, dst))
    except BaseException:
        for src, dst in reversed(done):
            os.rename(dst, src)
        raise
    finally:
        for stage in staging:
            shutil.rmtree(stage, ignore_errors=True)


def undo_bumps(changes: ChangeSet, bumps: list[FolderBump], model_repository: Path) -> None:
    """Put the working tree back as it was before `apply_bumps`: N+1 gone, N with the head contents."""
    root = Path(model_repository)
    git = Git(Git(root).toplevel())
    for bump in bumps:
        path = f"{changes.prefix}/{bump.model}/{bump.from_version}"
        stage = root / bump.model / f".triton-release-{uuid.uuid4().hex[:8]}"
        try:
            extract_tree(git, changes.head, path, stage / "head")
            fill_lfs_pointers(git, stage / "head", required=False)
            current = root / bump.model / str(bump.from_version)
            os.rename(current, stage / "released")
            try:
                os.rename(stage / "head", current)
            except BaseException:  # a signal between the two renames: N goes back as it was
                os.rename(stage / "released", current)
                raise
            shutil.rmtree(root / bump.model / str(bump.to_version), ignore_errors=True)
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def checkout_at(model_repository: Path, revision: str, dest: Path) -> Path | None:
    """The model repository as it was at `revision`, unpacked under `dest`; None when git lacks it
    (or there is no git repository around it)."""
    try:
        git = Git(Git(model_repository).toplevel())
    except UsageError:
        return None
    if not revision or not git.has_commit(revision):
        return None
    prefix = model_repository.resolve().relative_to(git.cwd.resolve()).as_posix()
    target = dest / "model_repository"
    extract_tree(git, revision, prefix, target)
    return target


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\n"


def lfs_pointer(path: Path | str) -> bytes | None:
    """The text of the git LFS pointer file at `path` (a small file that starts as one), else None."""
    with open(path, "rb") as handle:
        head = handle.read(1025)
    return head if len(head) <= 1024 and head.startswith(LFS_POINTER) else None


def fill_lfs_pointers(git: Git, tree: Path, required: bool = True) -> list[str]:
    """Replace git LFS pointer files under `tree` (an export from git) by their objects from the
    repository's LFS store, each checked against the pointer's sha256: the bytes committed. A
    pointer whose object is not here is refused (`required`), or left as it is. Returns the files
    filled in."""
    store = Path(git.text("rev-parse", "--git-common-dir"))
    store = (store if store.is_absolute() else git.cwd / store) / "lfs" / "objects"
    filled = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
        head = lfs_pointer(path)
        if head is None:
            continue
        fields = dict(line.split(" ", 1) for line in head.decode("ascii", "replace").splitlines() if " " in line)
        oid = fields.get("oid", "").removeprefix("sha256:")
        valid = re.fullmatch(r"[0-9a-f]{64}", oid) is not None  # never a path of the pointer's choosing
        source = store / oid[:2] / oid[2:4] / oid if valid else None
        if source is None or not source.is_file() or _sha256(source) != oid:
            if not required:
                continue
            raise Refused(f"""
                {path.relative_to(tree)} is a git LFS pointer, and its object ({oid[:12] or 'no oid'}) is not in this
                checkout's LFS store: the release would ship the pointer, not the file. Fetch it (git lfs pull; in
                a workflow, actions/checkout with lfs: true), then run again.""")
        shutil.copyfile(source, path)
        filled.append(str(path.relative_to(tree)))
    return filled


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def holds_bump(changes: ChangeSet, bumps: list[FolderBump], model_repository: Path) -> bool:
    """Whether the working tree holds exactly these bumps: N+1 as head's N, N as base's N (the
    bump a stopped run left behind, untouched since)."""
    root = Path(model_repository)
    git = Git(Git(root).toplevel())
    with tempfile.TemporaryDirectory(prefix="triton-release-") as scratch:
        for bump in bumps:
            path = f"{changes.prefix}/{bump.model}/{bump.from_version}"
            for ref, folder, name in ((changes.head, root / bump.model / str(bump.to_version), "head"),
                                      (changes.base, root / bump.model / str(bump.from_version), "base")):
                expected = Path(scratch) / bump.model / name
                extract_tree(git, ref, path, expected)
                fill_lfs_pointers(git, expected, required=False)
                if not folder.is_dir() or not _same_tree(expected, folder):
                    return False
    return True


def _same_tree(a: Path, b: Path) -> bool:
    def files(root: Path) -> dict[str, Path]:
        return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file() or p.is_symlink()}
    left, right = files(a), files(b)
    return left.keys() == right.keys() and all(filecmp.cmp(left[k], right[k], shallow=False) for k in left)
