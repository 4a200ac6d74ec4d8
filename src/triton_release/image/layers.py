"""The release image's layers: items packed into deterministic tars.

An item is a piece of the image with a stable key: a model's other files (config.pbtxt,
requirements.txt) "model/<m>", each version folder "model/<m>/<v>", the stub, a distribution, a
model's environment. Each layer is one tar with sorted entries, its
parent folders included, and every mtime, uid, gid and mode fixed: the same items give the same
layer digest in every build, on any machine, whichever other item changed. The tar is the layer
itself (image/assemble.py loads it as it is), so its sha256 is the layer's diff id.

The plan (image/plan.py) fits any repository in the layer budget.

Symbolic links that stay inside the model repository are followed: the layer holds what they
point to under the link's name. A link leaving the repository, pointing to nothing or looping is
refused, whether or not `validate` ran first.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from stat import S_ISDIR, S_ISREG
from typing import IO, BinaryIO, cast

from triton_release.cache import discard
from triton_release.errors import Refused
from triton_release.files import write_atomic
from triton_release.image.base import STUB_PATH
from triton_release.image.plan import Item, Planned, check_disjoint, layer_name, layer_slots, plan
from triton_release.models.repository import (
    GOLDEN_DIR,
    Model,
    Repository,
    kind_problem,
    link_problem,
    model_name_problem,
    walk,
)
from triton_release.problems import Problem

MODELS_DIR = PurePosixPath("models")
EPOCH = 0  # every entry's mtime
SKIP_NAMES = {"__pycache__", ".git", ".DS_Store", GOLDEN_DIR}
SERVER_COMMAND = ["tritonserver", "--model-repository=/models"]

SHOWN_KEYS = 5  # item keys a group layer shows in the report, besides its count


@dataclass(frozen=True)
class Layer:
    name: str  # the layer's name (its tar's), e.g. add_sub.v1.tar, group-07.tar
    items: tuple[str, ...]  # the keys of the items it holds, sorted
    digest: str = ""  # sha256 of the tar we made (stable across builds)
    size: int = 0  # bytes of file content
    grouped: bool = False  # a group layer (items placed by their key's hash)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "item_count": len(self.items),
            "items": list(self.items[:SHOWN_KEYS]),
            "tar_sha256": self.digest,
            "bytes": self.size,
        }


def _info(name: str, is_dir: bool, size: int = 0, executable: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir or executable else 0o644
    info.size = size
    info.mtime = EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


class Executable(bytes):
    """A file's content that is a program: mode 0755 in the layer."""


class _AsBlob:
    """A file read for the tar, hashed on the way as git names its blob (sha1 or sha256, told by
    the expected id's length)."""

    def __init__(self, handle: IO[bytes], size: int, expected: str) -> None:
        self.handle = handle
        self.hash = hashlib.new("sha1" if len(expected) == 40 else "sha256", b"blob %d\0" % size)

    def read(self, n: int = -1) -> bytes:
        data = self.handle.read(n)
        self.hash.update(data)
        return data


def write_layer_tar(
    out: IO[bytes], entries: Mapping[str, Path | bytes], blob_ids: Mapping[str, str] | None = None
) -> str:
    """Write one deterministic tar of `entries` (archive name -> file or folder on disk, or a
    file's content as bytes, mode 0644, or as Executable, mode 0755), every parent folder
    included; returns its sha256. A file is 0755 when its owner may run it (git's rule too).
    A file named in `blob_ids` must hold that git blob as it is read: else the checkout changed
    under the release, which is refused."""
    digest = hashlib.sha256()

    class Hashing:
        def write(self, data: bytes) -> int:
            digest.update(data)
            return out.write(data)

    names: dict[str, Path | bytes | None] = dict(entries)
    for arcname in entries:
        for parent in PurePosixPath(arcname).parents:
            if str(parent) not in (".", "/"):
                names.setdefault(str(parent), None)
    with tarfile.open(fileobj=cast(BinaryIO, Hashing()), mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for arcname in sorted(names):
            path = names[arcname]
            if isinstance(path, bytes):
                tar.addfile(_info(arcname, False, len(path), isinstance(path, Executable)), io.BytesIO(path))
            elif path is None or path.is_dir():
                tar.addfile(_info(arcname, True))
            else:
                stat = path.stat()
                if not S_ISREG(stat.st_mode):  # a FIFO would block the build, a device never end
                    raise Refused(f"{path}: neither a file nor a folder; remove it from the model repository.")
                blob = blob_ids.get(os.path.abspath(path)) if blob_ids else None
                with open(path, "rb") as handle:
                    source = _AsBlob(handle, stat.st_size, blob) if blob else handle
                    tar.addfile(_info(arcname, False, stat.st_size, bool(stat.st_mode & 0o100)), source)
                if blob and isinstance(source, _AsBlob) and source.hash.hexdigest() != blob:
                    raise Refused(f"""
                        {path} changed while the release read it in place: it no longer holds the
                        committed file (git blob {blob[:12]}). Nothing was pushed. Leave the checkout
                        alone and run again.""")
    return digest.hexdigest()


def content_size(entries: Mapping[str, Path | bytes]) -> int:
    """Bytes of file content in `entries` (folders count nothing)."""
    total = 0
    for value in entries.values():
        if isinstance(value, bytes):
            total += len(value)
        else:
            stat = os.stat(value)
            total += 0 if S_ISDIR(stat.st_mode) else stat.st_size
    return total


def entries_fingerprint(entries: Mapping[str, Path | bytes], blob_ids: Mapping[str, str] | None = None) -> str:
    """A digest naming the bytes `write_layer_tar` makes of `entries`: each archive name with its
    kind, mode and content (a file's read through, as the tar reads it). "" when an entry is
    neither a file nor a folder: its tar is refused when written. `blob_ids`: the git object id
    of files known to hold exactly their committed content, by absolute path; such a file is
    named by its id instead of being read (a model's gigabytes of weights are not hashed again)."""
    digest = hashlib.sha256()
    for arcname in sorted(entries):
        value = entries[arcname]
        digest.update(arcname.encode("utf-8", "surrogateescape") + b"\0")
        if isinstance(value, bytes):
            digest.update(b"x" if isinstance(value, Executable) else b"f")
            digest.update(hashlib.sha256(value).digest())
            continue
        try:
            stat = os.stat(value)
            if S_ISDIR(stat.st_mode):
                digest.update(b"d")
                continue
            if not S_ISREG(stat.st_mode):
                return ""
            blob = blob_ids.get(os.path.abspath(value)) if blob_ids else None
            if blob:  # its own kinds, each followed by the id and a NUL: never read as a content digest
                digest.update((b"X" if stat.st_mode & 0o100 else b"F") + blob.encode("ascii") + b"\0")
                continue
            digest.update(b"x" if stat.st_mode & 0o100 else b"f")
            with open(value, "rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
        except OSError:
            return ""
    return digest.hexdigest()


# -- items: the models' and the runtime's -----------------------------------------------------


def model_entries(model: Model, paths: list[Path]) -> dict[str, Path | bytes]:
    """Each of `paths` (the model folder or below it) by its name in the image."""
    top = str(model.path)
    under, named = top.rstrip("/") + "/", f"{MODELS_DIR}/{model.name}"
    entries: dict[str, Path | bytes] = {}
    for path in paths:
        text = str(path)  # in strings: pathlib's relative_to for every file of a thousand models was slow
        if text == top:
            entries[named] = path
        elif text.startswith(under):
            entries[f"{named}/{text[len(under) :]}"] = path
        else:
            entries[str(MODELS_DIR / model.name / path.relative_to(model.path).as_posix())] = path
    return entries


def _skipped(name: str) -> bool:
    return name in SKIP_NAMES or name.endswith(".pyc")


def _refuse(problem: Problem) -> Refused:
    return Refused(f"{problem}. Nothing was built; run `triton-release validate` to see every problem.")


def _model_tree(folder: Path, root: Path) -> list[Path]:
    """`folder` and everything below it (or the file `folder`), links inside `root` followed;
    refused at a bad link."""
    problem = link_problem(folder, root) or kind_problem(folder)
    if problem:
        raise _refuse(problem)
    if not folder.is_dir():
        return [folder]
    paths, problems = walk(folder, root, _skipped)
    if problems:
        raise _refuse(problems[0])
    return [folder, *paths]


def model_key(model: str, version: int | None = None) -> str:
    return f"model/{model}" if version is None else f"model/{model}/{version}"


def plan_layers(model: Model, root: Path | None = None) -> list[tuple[str, int | None, list[Path]]]:
    """(layer file name when alone in its layer, version, paths) for the model's other files,
    then each version. `root`: the model repository (default: the model folder's parent)."""
    root = model.path.parent if root is None else Path(root)
    name_problem = model_name_problem(model.name)
    problem = Problem(model.path, name_problem) if name_problem else link_problem(model.path, root)
    if problem:
        raise _refuse(problem)
    versions = {str(v) for v in model.versions}
    others = [
        p
        for p in sorted(model.path.iterdir())
        if p.name not in SKIP_NAMES and p.name not in versions and not p.name.startswith(".")
    ]
    other_paths: list[Path] = [model.path]
    for path in others:
        other_paths.extend(_model_tree(path, root))
    plan: list[tuple[str, int | None, list[Path]]] = [(layer_name(model_key(model.name)), None, other_paths)]
    for version in model.versions:
        folder = model.path / str(version)
        plan.append((layer_name(model_key(model.name, version)), version, _model_tree(folder, root)))
    return plan


def _with_files(model: Model, entries: dict[str, Path | bytes], files: Mapping[str, bytes]) -> dict:
    """`entries` with `files` (path relative to the model folder -> content) replacing or added."""
    versions = {str(v) for v in model.versions}
    for relative, content in sorted(files.items()):
        path = PurePosixPath(relative)
        if path.is_absolute() or not path.parts or ".." in path.parts or path.parts[0] in versions:
            raise ValueError(f"{model.name}: {relative} is not one of the model's other files")
        arcname = str(MODELS_DIR / model.name / path)
        for name in [n for n in entries if n == arcname or n.startswith(arcname + "/")]:
            del entries[name]
        entries[arcname] = bytes(content)
    return entries


def model_items(model: Model, root: Path | None = None, files: Mapping[str, bytes] | None = None) -> list[Item]:
    """The model's items: its other files ("model/<m>", with `files` replacing or added), then
    one per version folder ("model/<m>/<v>")."""
    items = []
    for _, version, paths in plan_layers(model, root):
        entries = model_entries(model, paths)
        if version is None and files:
            entries = _with_files(model, entries, files)
        items.append(Item(model_key(model.name, version), entries, content_size(entries)))
    return items


@dataclass(frozen=True)
class Runtime:
    """What the image gets besides the models: a replacement stub (a file: a source stub is
    compiled before, image/compiler.py), extra items as they are (the models' environments), and
    model files the image holds instead of the user's."""

    stub_file: Path | None = None
    extra: tuple[Item, ...] = ()
    model_files: Mapping[str, Mapping[str, bytes]] = field(default_factory=dict)  # model -> {relative path: content}

    def items(self) -> list[Item]:
        found = []
        if self.stub_file is not None:
            entries: dict[str, Path | bytes] = {STUB_PATH.lstrip("/"): self.stub_file}
            found.append(Item("stub", entries, content_size(entries)))
        return found + list(self.extra)


def order_layers(layers: list[Layer], previous: list[list[str]]) -> list[Layer]:
    """Unchanged layers first, in the previous build's order, then the changed and new ones, the
    largest first (a first build: all of them, so a torch-sized distribution comes before the
    small layers that change more often).

    The daemon holds every layer up to the first changed or removed one as a chain, so a
    one-model change sends one layer, not every layer after it. Layer digests do not depend on
    the order.
    """
    current = {(layer.name, layer.digest): layer for layer in layers}
    kept = [current.pop((name, digest)) for name, digest in previous if (name, digest) in current]
    return kept + sorted(current.values(), key=lambda layer: (-layer.size, layer.name))


def image_items(repo: Repository, models: list[str] | None = None, runtime: Runtime = Runtime()) -> list[Item]:
    """Every item of the image: the runtime's, then each model's (its files from the runtime
    replacing or added)."""
    items = runtime.items()
    for model in repo:
        if models is not None and model.name not in models:
            continue
        items += model_items(model, repo.root, runtime.model_files.get(model.name))
    return items


def plan_image(
    repo: Repository,
    base_image: str,
    models: list[str] | None = None,
    runtime: Runtime = Runtime(),
    *,
    max_layers: int = 120,
    base_layers: int = 0,
) -> list[Planned]:
    """The image's layers as planned: every item placed, within `max_layers` with the base
    image's `base_layers` counted; refused before anything is written when they cannot fit."""
    slots = layer_slots(max_layers, base_layers, base_image)
    items = image_items(repo, models, runtime)
    check_disjoint(items)
    return plan(items, slots)


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
LAYER_FORMAT = "2"  # in every remembered digest's key: change it when write_layer_tar's bytes change


class StaleDigest(Exception):
    """A remembered layer digest did not match the tar written again."""


class LayerTars:
    """The planned layers' tars in `folder`, each written once. Every layer's digest is kept in
    `known` (a folder) by its items' fingerprints, and its tar is written only when asked for: a
    torch-sized distribution the daemon already holds is neither read nor sent again, and a
    thousand unchanged model folders are read, not written. `blob_ids`: files named by their git
    object id, not read (see `entries_fingerprint`). `ready`: told the image's diff ids and the
    tars written (diff id -> file) by `tell`."""

    def __init__(
        self,
        folder: Path,
        known: Path | None = None,
        blob_ids: Mapping[str, str] | None = None,
        ready: Callable[[Sequence[str], Mapping[str, Path]], None] | None = None,
    ) -> None:
        self.folder, self.known, self.blob_ids, self.ready = folder, known, blob_ids, ready
        self._planned: dict[str, Planned] = {}
        self._paths: dict[str, Path] = {}

    def _key(self, planned: Planned) -> str | None:
        """The remembered digest's name: the layer's name and each item's fingerprint (a given one,
        else its content's: reading a thousand small model folders is far cheaper than writing
        them into tars again)."""
        if self.known is None:
            return None
        prints = [
            item.fingerprint
            or (f"content-sha256:{found}" if (found := entries_fingerprint(item.entries, self.blob_ids)) else "")
            for item in planned.items
        ]
        if not all(prints):
            return None
        text = "\n".join([LAYER_FORMAT, planned.name, *(f"{i.key}={p}" for i, p in zip(planned.items, prints))])
        return hashlib.sha256(text.encode()).hexdigest()

    def _write(self, planned: Planned) -> tuple[str, Path]:
        """The layer's tar written, named by its digest once written: a tar an upload reads while a
        retry writes the layers again is never rewritten under it with other bytes."""
        entries: dict[str, Path | bytes] = {}
        for item in planned.items:
            entries.update(item.entries)
        writing = self.folder / f".{planned.name}.writing"
        try:
            with open(writing, "wb") as handle:
                digest = write_layer_tar(handle, entries, self.blob_ids)
            path = self.folder / f"{digest}.tar"
            os.replace(writing, path)
        finally:
            writing.unlink(missing_ok=True)
        return digest, path

    def _remembered(self, path: Path | None) -> str:
        """The digest remembered in `path`, or "" (none, or one of the wrong shape: discarded with
        a warning; the cache folder may come from anywhere)."""
        if path is None or not path.exists():
            return ""
        try:
            digest = path.read_text(encoding="ascii").strip() if path.is_file() else ""
        except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
            digest = ""
        if _SHA256_HEX.fullmatch(digest):
            return digest
        discard(path, "is not a layer digest (64 hex digits)")
        return ""

    def layer(self, planned: Planned) -> Layer:
        key = self._key(planned)
        remembered = self.known / key if key and self.known is not None else None
        digest = self._remembered(remembered)
        if not digest:
            digest, self._paths[digest] = self._write(planned)
            if remembered is not None and self._key(planned) == key:  # unchanged while it was written
                write_atomic(remembered, digest)
        self._planned[digest] = planned
        return Layer(
            planned.name,
            tuple(item.key for item in planned.items),
            digest,
            sum(item.size for item in planned.items),
            planned.grouped,
        )

    def tar(self, digest: str) -> Path:
        """The tar of the layer with `digest` (sha256 hex), written now if it was not."""
        if digest not in self._paths:
            planned = self._planned[digest]
            written, path = self._write(planned)
            if written != digest:
                key = self._key(planned)
                if key and self.known is not None:
                    (self.known / key).unlink(missing_ok=True)
                raise StaleDigest(f"{planned.name}: remembered {digest[:12]}, written {written[:12]}")
            self._paths[digest] = path
        return self._paths[digest]

    def tell(self, diff_ids: Sequence[str]) -> None:
        """Tell `ready` the image's `diff_ids` and the tars written so far."""
        if self.ready is not None:
            self.ready(diff_ids, {f"sha256:{digest}": path for digest, path in self._paths.items()})

    def forget(self) -> None:
        """Remember no digest from now on (after a stale one)."""
        self.known = None
