"""The cache folder (inspections, stubs, resolved requirements, locks) and atomic writes.

Every file or folder the tool keeps is written under a temporary name beside its target and
renamed into place, so a reader never sees half of one, and concurrent writers do not collide.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from triton_release.errors import InfrastructureError

_root: Path | None = None


def configure(env: Mapping[str, str]) -> Path:
    """Choose the cache folder from the environment, once, at start-up."""
    global _root
    explicit = env.get("TRITON_RELEASE_CACHE")
    if explicit:
        _root = Path(explicit)
    else:
        _root = Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME") or Path.home()) / ".cache") / "triton-release"
    return _root


def cache_dir() -> Path:
    """Where inspections, stubs and resolved requirements are kept between runs."""
    return _root if _root is not None else configure(os.environ)


def _partial(target: Path) -> Path:
    return target.with_name(f"{target.name}.partial-{uuid.uuid4().hex[:8]}")


def _folder(folder: Path) -> None:
    """Make `folder`; an unwritable one is an infrastructure error that says how to choose another."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return
        error = PermissionError(13, "Permission denied")
    except OSError as exc:
        error = exc
    root = cache_dir()
    hint = (" Point TRITON_RELEASE_CACHE at a writable folder." if folder == root or root in folder.parents
            else " Choose a writable place.")
    raise InfrastructureError(f"Cannot write in {folder} ({error.strerror}).{hint}")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temporary path beside `target` to write a file into; renamed over `target` on success,
    removed on failure."""
    _folder(target.parent)
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
    _folder(target.parent)
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


@contextmanager
def exclusive(name: str, on_wait=None) -> Iterator[None]:
    """One holder of the lock `name` at a time on this machine; `on_wait()` is called before
    waiting for another holder."""
    locks = cache_dir() / "locks"
    _folder(locks)
    with open(locks / f"{hashlib.sha256(name.encode()).hexdigest()[:16]}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Memo:
    """Answers of a pure function of a text (a config.pbtxt parsed, a model file's calls), kept
    between runs by the text's sha256 in one JSON file: a repository of a thousand models parses
    only what changed. `version` is part of the file's name: change it when the answers change.
    At most `keep` answers are kept, the most recently used."""

    def __init__(self, name: str, version: str, keep: int = 20_000) -> None:
        self.name, self.version, self.keep = name, version, keep
        self._answers: dict[str, object] | None = None
        self._dirty = False

    @property
    def path(self) -> Path:
        return cache_dir() / "memo" / f"{self.name}-{self.version}.json"

    def _load(self) -> dict[str, object]:
        if self._answers is None:
            try:
                found = json.loads(self.path.read_text())
                self._answers = found if isinstance(found, dict) else {}
            except (OSError, ValueError):
                self._answers = {}
            atexit.register(self.save)
        return self._answers

    @staticmethod
    def key(text: str | bytes) -> str:
        return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()

    def get(self, text: str | bytes) -> object | None:
        answers = self._load()
        key = self.key(text)
        if key not in answers:
            return None
        answers[key] = answers.pop(key)  # the most recently used last
        return answers[key]

    def put(self, text: str | bytes, answer: object) -> None:
        answers = self._load()
        answers[self.key(text)] = answer
        self._dirty = True

    def save(self) -> None:
        if not self._dirty or self._answers is None:
            return
        kept = dict(list(self._answers.items())[-self.keep:])
        try:
            write_atomic(self.path, json.dumps(kept))
        except OSError:
            pass  # a cache that cannot be written is only slower next time
        self._dirty = False
