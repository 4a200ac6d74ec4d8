"""The git blob id of a file on disk, hashed once a run: the bump's proof of N, the check of the
bumped folders before the push and the release commit each ask for the same weights file's id,
and hashing gigabytes three times costs seconds each.

An id is remembered by the file's identity and state (device, inode, size, modification and
change times, in nanoseconds), so the folder the bump moves from N to N+1 keeps its ids, and any
write since changes the key. The kernel stamps file times from a coarse clock (a few ms): a write
within the same tick as the one before it could leave both times as they were. So an id is
remembered only for a file whose times are more than RACY_NS older than the hash's start (git's
"racily clean" rule, made stricter), and only when the file's state did not change while it was
read; any other file is hashed every time it is asked for.
"""

from __future__ import annotations

import hashlib
import os
import time

RACY_NS = 2_000_000_000  # a file changed less than this before its hash began is not remembered
CHUNK = 1 << 20

_known: dict[tuple[int, ...], str] = {}


def _state(info: os.stat_result, algorithm: str) -> tuple[int, ...]:
    return (
        info.st_dev,
        info.st_ino,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
        len(algorithm),  # sha1 and sha256 ids of the same file apart
    )


def blob_id(path: str, like: str) -> str:
    """The git object id of the file's bytes as a blob (what `git hash-object --no-filters` gives),
    in the object format of the id `like` (40 hex digits: sha1, else sha256), as image/layers.py
    checks a blob it reads; hashed in Python (its SHA-1 reads weights about three times as fast as
    git's), and once a run for a file that did not change since (see the module's note)."""
    algorithm = "sha1" if len(like) == 40 else "sha256"
    started = time.time_ns()
    with open(path, "rb") as handle:
        before = os.fstat(handle.fileno())
        key = _state(before, algorithm)
        if (known := _known.get(key)) is not None:
            return known
        digest = hashlib.new(algorithm, b"blob %d\0" % before.st_size)
        while block := handle.read(CHUNK):
            digest.update(block)
        after = os.fstat(handle.fileno())
    found = digest.hexdigest()
    settled = max(before.st_mtime_ns, before.st_ctime_ns) < started - RACY_NS
    if settled and _state(after, algorithm) == key:
        _known[key] = found
    return found


def forget() -> None:
    """Remember no id from before (tests that rewrite a file and set its times back)."""
    _known.clear()
