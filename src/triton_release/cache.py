"""The cache folder (inspections, stubs, resolved requirements, locks): where it is, which of its
entries this run has checked, and its locks. What goes in is written atomically (files.py)."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar, overload

from triton_release import files
from triton_release.errors import InfrastructureError
from triton_release.files import write_atomic

log = logging.getLogger("triton_release")

_root: Path | None = None
# Cache entries checked in this run against what they claim to be (an unpacked wheel against the
# wheel's RECORD): the cache is restored from elsewhere (actions/cache, another branch or fork),
# so what it holds is a hint, checked once per run before it is used, never trusted as it is.
_checked: set[str] = set()


def configure(env: Mapping[str, str]) -> Path:
    """Choose the cache folder from the environment, once, at start-up (a run begins: nothing
    in the cache counts as checked yet)."""
    global _root
    _checked.clear()
    explicit = env.get("TRITON_RELEASE_CACHE")
    if explicit:
        _root = Path(explicit)
    else:
        _root = Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME") or Path.home()) / ".cache") / "triton-release"
    files.REMEDIES.clear()
    files.REMEDIES[_root] = "Point TRITON_RELEASE_CACHE at a writable folder."
    return _root


def cache_dir() -> Path:
    """Where inspections, stubs and resolved requirements are kept between runs."""
    return _root if _root is not None else configure(os.environ)


def checked(entry: Path) -> bool:
    """Whether `entry` was checked against what it claims to be in this run."""
    return os.fspath(entry) in _checked


def mark_checked(entry: Path) -> None:
    _checked.add(os.fspath(entry))


def discard(entry: Path, why: str) -> None:
    """Remove a cache entry that is not what it claims to be, with a warning: it is made again."""
    log.warning(
        f"the cache entry {entry} {why}; it was discarded and is made again. The cache folder "
        f"({cache_dir()}) is only a hint: restore it from a trusted run, or remove it."
    )
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        entry.unlink(missing_ok=True)


@contextmanager
def exclusive(name: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """One holder of the lock `name` at a time on this machine; `on_wait()` is called before
    waiting for another holder."""
    locks = cache_dir() / "locks"
    files.writable_folder(locks)
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


T = TypeVar("T")

# what reading a remembered answer of the wrong shape raises: it is discarded, never a crash
SHAPE_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError)


class Memo:
    """Answers of a pure function of a text (a config.pbtxt parsed, a model file's calls), kept
    between runs by the text's sha256 in one JSON file: a repository of a thousand models parses
    only what changed. `version` is part of the file's name: change it when the answers change.
    At most `keep` answers are kept, the most recently used.

    The file comes from the cache folder, which may come from anywhere: a file that is not a JSON
    object, or an answer that `get`'s `read` cannot read, is discarded with a warning."""

    def __init__(self, name: str, version: str, keep: int = 20_000) -> None:
        self.name, self.version, self.keep = name, version, keep
        self._answers: dict[str, object] | None = None
        self._dirty = False
        self._warned = False  # one warning per memo and run, however many answers are discarded

    @property
    def path(self) -> Path:
        return cache_dir() / "memo" / f"{self.name}-{self.version}.json"

    def _load(self) -> dict[str, object]:
        if self._answers is None:
            try:
                found = json.loads(self.path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                found = {}
            except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
                found = self._wrong(f"cannot be read as JSON ({exc.__class__.__name__})")
            if not isinstance(found, dict):
                found = self._wrong("is not a JSON object")
            self._answers = found
            atexit.register(self.save)
        return self._answers

    def _wrong(self, why: str) -> dict[str, object]:
        if not self._warned:
            log.warning(f"the memo {self.path} {why}; discarded (it is only a cache: worked out again)")
        self._warned = True
        self._dirty = True  # the next save replaces it
        return {}

    @staticmethod
    def key(text: str | bytes) -> str:
        return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()

    @overload
    def get(self, text: str | bytes) -> object | None: ...

    @overload
    def get(self, text: str | bytes, read: Callable[[object], T]) -> T | None: ...

    def get(self, text: str | bytes, read: Callable[[object], T] | None = None) -> object | None:
        """The answer kept for `text`, or None. `read` turns it into what the caller uses; an
        answer it cannot read (it raises one of SHAPE_ERRORS: a memo of another shape, edited, or
        from another version) is discarded with a warning, and None returned."""
        answers = self._load()
        key = self.key(text)
        if key not in answers:
            return None
        answers[key] = answers.pop(key)  # the most recently used last
        if read is None:
            return answers[key]
        try:
            return read(answers[key])
        except SHAPE_ERRORS as exc:
            del answers[key]
            self._wrong(f"held an answer of the wrong shape ({exc.__class__.__name__}: {str(exc)[:80]})")
            return None

    def put(self, text: str | bytes, answer: object) -> None:
        answers = self._load()
        answers[self.key(text)] = answer
        self._dirty = True

    def save(self) -> None:
        if not self._dirty or self._answers is None:
            return
        kept = dict(list(self._answers.items())[-self.keep :])
        self._dirty = False
        # a memo that cannot be written (an unwritable cache folder: InfrastructureError) is dropped:
        # the answers are worked out again next time. Saved at exit, it can fail no command.
        with contextlib.suppress(OSError, InfrastructureError):
            write_atomic(self.path, json.dumps(kept))
