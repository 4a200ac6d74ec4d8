"""Atomic writes: every file or folder the tool keeps (the cache's entries, the report, the
journal, golden outputs) is written under a temporary name beside its target and renamed into
place, so a reader never sees half of one, and concurrent writers do not collide."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from triton_release.errors import InfrastructureError

# Folders whose unwritable state has a better remedy than "choose a writable place": the cache's
# root, named by the cache when it is configured (cache.py).
REMEDIES: dict[Path, str] = {}


def _partial(target: Path) -> Path:
    return target.with_name(f"{target.name}.partial-{uuid.uuid4().hex[:8]}")


def writable_folder(folder: Path) -> None:
    """Make `folder`; an unwritable one is an infrastructure error that says how to choose another."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return
        error: OSError = PermissionError(13, "Permission denied")
    except OSError as exc:
        error = exc
    remedy = next(
        (text for root, text in REMEDIES.items() if folder == root or root in folder.parents),
        "Choose a writable place.",
    )
    raise InfrastructureError(f"Cannot write in {folder} ({error.strerror}). {remedy}")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path beside `target` to write a file into; renamed over `target` on success,
    removed on failure."""
    writable_folder(target.parent)
    partial = _partial(target)
    try:
        yield partial
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def write_atomic(target: Path, data: bytes | str, mode: int | None = None) -> None:
    with atomic_path(target) as partial:
        if isinstance(data, str):
            partial.write_text(data, encoding="utf-8")
        else:
            partial.write_bytes(data)
        if mode is not None:
            partial.chmod(mode)


@contextmanager
def atomic_folder(target: Path, complete: str = ".complete") -> Iterator[Path]:
    """A temporary folder beside `target`, moved into place with a `complete` marker on success.
    When another writer finished the same folder first, theirs is kept and ours removed."""
    writable_folder(target.parent)
    partial = _partial(target)
    try:
        partial.mkdir()
        yield partial
        (partial / complete).write_text("")
        try:
            partial.rename(target)
        except OSError:
            if not (target / complete).exists():  # a stale, unfinished one is in the way
                shutil.rmtree(target, ignore_errors=True)
                partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
