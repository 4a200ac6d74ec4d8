"""A file's git blob id is hashed once a run, and any write since is hashed again (#50 item 1)."""

from __future__ import annotations

import os
import subprocess

from triton_release.history import blobs


def git_id(path) -> str:
    return subprocess.run(
        ["git", "hash-object", "--no-filters", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()


def settled(path, data: bytes) -> None:
    """`data` written into `path`, its times set well before now (not racily clean)."""
    path.write_bytes(data)
    old = os.stat(path).st_mtime_ns - 10 * blobs.RACY_NS
    os.utime(path, ns=(old, old))


def test_the_id_is_gits_before_and_after_its_folder_moves(tmp_path):
    first = tmp_path / "1" / "weights.bin"
    first.parent.mkdir()
    settled(first, os.urandom(3 << 20))
    expected = git_id(first)
    assert blobs.blob_id(str(first), "0" * 40) == expected
    moved = tmp_path / "2"
    os.rename(first.parent, moved)  # the bump moves N to N+1: the same files
    assert blobs.blob_id(str(moved / "weights.bin"), "0" * 40) == expected
    assert len(blobs.blob_id(str(moved / "weights.bin"), "0" * 64)) == 64  # sha256 apart


def test_a_write_after_the_hash_is_hashed_again_even_with_its_times_set_back(tmp_path):
    path = tmp_path / "weights.bin"
    settled(path, b"a" * 4096)
    assert blobs.blob_id(str(path), "0" * 40) == git_id(path)
    before = os.stat(path)
    with open(path, "r+b") as handle:  # the same size, its modification time put back
        handle.write(b"b")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert blobs.blob_id(str(path), "0" * 40) == git_id(path)  # its change time moved


def test_a_file_changed_just_now_is_not_remembered(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"fresh")
    blobs.blob_id(str(path), "0" * 40)
    info = os.stat(path)
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, len("sha1"))
    assert key not in blobs._known
