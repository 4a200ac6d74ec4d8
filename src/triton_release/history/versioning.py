"""Version folders (bump N -> N+1, N restored) and the release's semver from the change."""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import semver

from triton_release.history.changes import ChangeSet, refuse_released_edits
from triton_release.errors import Refused
from triton_release.history.git import Git
from triton_release.models.repository import datatype_name

# -- version folders --------------------------------------------------------------------------

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


# -- semver -----------------------------------------------------------------------------------

def signature(config) -> dict | None:
    """What clients depend on: tensors (data type, dims) and whether there is a batch dimension."""
    if config is None:
        return None
    tensors = {f"{kind} {t.name}": (datatype_name(t.data_type), tuple(t.dims))
               for kind in ("input", "output") for t in getattr(config, kind)}
    return {"tensors": tensors, "batched": config.max_batch_size > 0}


@dataclass(frozen=True)
class ReleaseKind:
    kind: str | None        # major | minor | patch | None (nothing changed in the image)
    reasons: tuple[str, ...]

    def to_json(self) -> dict:
        return {"kind": self.kind, "reasons": list(self.reasons)}


ORDER = {None: 0, "patch": 1, "minor": 2, "major": 3}


def release_kind(changes: ChangeSet, bumps: list[FolderBump], signatures: dict | None = None) -> ReleaseKind:
    """The semver part to bump, with a reason for each step up. `signatures` may give
    (side, model) -> signature for models without config.pbtxt, as the server saw them."""
    if changes.base is None:
        return ReleaseKind("minor", ("first release: every model counts as added (1.0.0 when no release "
                                     "exists yet)",))
    reasons: list[tuple[str, str]] = []
    bumped = {b.model for b in bumps}
    for name, change in sorted(changes.models.items()):
        if change.status == "removed":
            reasons.append(("major", f"{name}: model removed"))
            continue
        if change.status == "added":
            reasons.append(("minor", f"{name}: model added"))
            continue
        if change.golden_only:
            continue
        found = [("minor", f"{name}: new version folder")] if name in bumped or change.added_versions else []
        found += _signature_change(name, changes, signatures or {})
        reasons.extend(found or [("patch", f"{name}: {', '.join(change.reasons) or 'files changed'}")])
    if not reasons:
        return ReleaseKind(None, ("nothing changed in the image",))
    kind = max((k for k, _ in reasons), key=ORDER.__getitem__)
    return ReleaseKind(kind, tuple(r for _, r in reasons))


def _signature_change(name: str, changes: ChangeSet, signatures: dict) -> list[tuple[str, str]]:
    def sig(side: str):
        given = signatures.get((side, name))
        return given if given is not None else signature(changes.configs.get((side, name)))

    old, new = sig("base"), sig("head")
    if old is None or new is None:
        return [("minor", f"{name}: signature unknown (no config.pbtxt); counted as minor")]
    found = []
    if old["batched"] != new["batched"]:
        found.append(("major", f"{name}: max_batch_size changed between 0 and non-zero"))
    for tensor, spec in old["tensors"].items():
        if tensor not in new["tensors"]:
            found.append(("major", f"{name}: {tensor} removed or renamed"))
        elif new["tensors"][tensor] != spec:
            (dtype, dims), (ndtype, ndims) = spec, new["tensors"][tensor]
            found.append(("major", f"{name}: {tensor} changed from {dtype} {list(dims)} to {ndtype} {list(ndims)}"))
    for tensor in sorted(set(new["tensors"]) - set(old["tensors"])):
        found.append(("minor", f"{name}: {tensor} added"))
    return found


def previous_release(registry_tags: list[str], git: Git | None = None) -> tuple[semver.Version | None, str]:
    """The highest X.Y.Z tag of the registry repository, else the highest vX.Y.Z git tag."""
    def highest(tags, pattern):
        found = [semver.Version(*map(int, m.groups())) for t in tags if (m := pattern.match(t))]
        return max(found) if found else None

    found = highest(registry_tags, re.compile(r"^(\d+)\.(\d+)\.(\d+)$"))
    if found:
        return found, "registry"
    if git is not None:
        found = highest(git.tags("v*"), re.compile(r"^v(\d+)\.(\d+)\.(\d+)$"))
        if found:
            return found, "git tag"
    return None, "none"


def next_version(previous: semver.Version | None, kind: str | None) -> semver.Version | None:
    if kind is None:
        return None
    if previous is None:
        return semver.Version(1, 0, 0)
    return {"major": previous.bump_major, "minor": previous.bump_minor, "patch": previous.bump_patch}[kind]()
