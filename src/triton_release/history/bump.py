"""Version folders: bump N -> N+1 with the head contents, N restored to its released contents."""

from __future__ import annotations

import os
import shutil
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from triton_release.history.changes import ChangeSet, refuse_released_edits
from triton_release.errors import Refused
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
    `git archive`: a large weights file never sits in memory."""
    dest.mkdir(parents=True)
    strip = PurePosixPath(strip).as_posix()  # "./a/1" -> "a/1"; "." is the whole tree
    with git.archive_stream(ref, strip) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            rel = PurePosixPath(member.name)
            if strip != "." and not str(rel).startswith(strip + "/"):
                continue
            target = dest / (rel if strip == "." else rel.relative_to(strip))
            if ".." in rel.parts:
                raise Refused(f"{member.name}: a path that leaves its version folder; rename it.")
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.issym():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(member.linkname, target)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                target.chmod(0o755 if member.mode & 0o111 else 0o644)


def apply_bumps(changes: ChangeSet, bumps: list[FolderBump], model_repository: Path) -> None:
    """Write N+1 with the head contents and restore N to its base contents, for every bump.

    All-or-nothing: every folder is first staged beside its model, then swapped in by renames;
    a failure undoes the swaps done so far and removes the staging.
    """
    root = Path(model_repository)
    git = Git(Git(root).toplevel())
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
            current = root / bump.model / str(bump.from_version)
            os.rename(current, stage / "released")
            os.rename(stage / "head", current)
            shutil.rmtree(root / bump.model / str(bump.to_version), ignore_errors=True)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
