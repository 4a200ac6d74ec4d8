"""The bump moves version folder N to N+1 in place: whatever can still write into N's files (a
hard link, a process holding one open for writing) would write into the released version. Such a
folder is copied from git instead, and the release commit proves each bumped folder holds exactly
the tree the image was built from (#48 item 1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from support.models import PYTHON_MODEL, python_model_files
from triton_release import steps
from triton_release.cli.main import main
from triton_release.errors import Refused
from triton_release.history.commit import commit
from triton_release.history.git import GIT_SETTINGS, Git

WEIGHTS = bytes(range(256)) * 64  # 16 KiB: more than an LFS pointer's size


@pytest.fixture
def changed(git_repo, monkeypatch):
    """a/1 with weights, released as v1.0.0, then its code changed and committed: the next bump
    moves a/1 to a/2."""
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    (git_repo.models / "a" / "1" / "weights.bin").write_bytes(WEIGHTS)
    git_repo.base = git_repo.commit("release")
    git_repo.git("tag", "v1.0.0")
    git_repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit("a: new code")
    monkeypatch.chdir(git_repo.root)
    return git_repo


def bump(tmp_path) -> int:
    return main(["bump", "--base", "v1.0.0"], env={"HOME": str(tmp_path)})


def test_a_folder_with_a_hard_link_is_copied_not_moved(changed, tmp_path):
    outside = tmp_path / "checkpoint.bin"  # a training job's link to the weights it goes on writing
    os.link(changed.models / "a" / "1" / "weights.bin", outside)
    assert bump(tmp_path) == 0
    released = changed.models / "a" / "2" / "weights.bin"
    assert released.read_bytes() == WEIGHTS
    assert os.stat(released).st_ino != os.stat(outside).st_ino
    with open(outside, "r+b") as handle:
        handle.write(b"trained on")
    assert released.read_bytes() == WEIGHTS


def test_a_folder_with_a_file_open_for_writing_is_copied_not_moved(changed, tmp_path):
    held = changed.models / "a" / "1" / "weights.bin"
    writer = subprocess.Popen(  # holds the weights open, and writes when told to
        [
            sys.executable,
            "-c",
            "import sys\n"
            f"handle = open({str(held)!r}, 'r+b')\n"
            "print('open', flush=True)\n"
            "sys.stdin.readline()\n"
            "handle.write(b'trained on'); handle.flush()\n"
            "print('written', flush=True)\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "open"
        assert bump(tmp_path) == 0
        writer.stdin.write("write\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "written"
    finally:
        writer.kill()
        writer.wait()
    assert (changed.models / "a" / "2" / "weights.bin").read_bytes() == WEIGHTS
    assert (changed.models / "a" / "1" / "weights.bin").read_bytes() == WEIGHTS


def test_a_folder_nothing_else_holds_is_still_moved(changed, tmp_path):
    before = os.stat(changed.models / "a" / "1" / "weights.bin").st_ino
    assert bump(tmp_path) == 0
    assert os.stat(changed.models / "a" / "2" / "weights.bin").st_ino == before  # the fast path stays


@pytest.mark.parametrize(
    ("write", "named"),
    [
        ({"a/2/weights.bin": b"trained on" + WEIGHTS[10:]}, "model_repository/a/2/weights.bin (changed)"),
        ({"a/2/notes.txt": "mine"}, "model_repository/a/2/notes.txt (added)"),
        ({"a/1/model.py": "# an editor's save\n"}, "model_repository/a/1/model.py (changed)"),
    ],
)
def test_a_bumped_folder_written_after_the_build_is_refused_before_the_commit(changed, write, named):
    head = changed.git("rev-parse", "HEAD")
    planned = steps.changes(changed.models, changed.base)
    bumped = steps.bump(changed.models, planned)
    changed.write(write)  # after the image was built from the folders
    with pytest.raises(Refused, match="changed after the image was built") as refused:
        commit(changed.models, "1.1.0", bumped, head)
    message = " ".join(str(refused.value).split())
    assert named in message
    assert "No release commit and no git tag v1.1.0 were made" in message
    assert changed.git("rev-parse", "HEAD") == head
    assert changed.git("tag", "--list", "v1.1.0") == ""
    assert changed.git("diff", "--cached", "--name-only") == ""  # nothing left staged

    # the advice: the folders back as committed, then the bump again, and its commit
    changed.git("checkout", "HEAD", "--", "model_repository/a/1")
    assert "remove model_repository/a/2" in message
    shutil.rmtree(changed.models / "a" / "2")
    bumped = steps.bump(changed.models, planned)
    done = commit(changed.models, "1.1.0", bumped, head)
    assert done.committed and changed.git("tag", "--points-at", "HEAD") == "v1.1.0"
    assert changed.git("rev-parse", "HEAD:model_repository/a/2") == changed.git(
        "rev-parse", f"{head}:model_repository/a/1"
    )


def test_the_release_commit_stages_the_bump_by_the_ids_git_holds_and_leaves_no_flag(changed, monkeypatch):
    """Weights git holds already are not hashed and stored again by `git add` (#50 item 1): the
    commit stages the proven folders by their blob ids, and leaves no file marked in the index."""
    from triton_release.history.git import Git, subcommand

    head = changed.git("rev-parse", "HEAD")
    planned = steps.changes(changed.models, changed.base)
    bumped = steps.bump(changed.models, planned)
    ran = []
    real = Git.run

    def recording(self, *args, **kwargs):
        ran.append(subcommand(args))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Git, "run", recording)
    done = commit(changed.models, "1.1.0", bumped, head)
    assert done.committed and "add" not in ran
    assert changed.git("rev-parse", "HEAD:model_repository/a/2") == changed.git(
        "rev-parse", f"{head}:model_repository/a/1"
    )
    assert changed.git("rev-parse", "HEAD:model_repository/a/1") == changed.git(
        "rev-parse", f"{changed.base}:model_repository/a/1"
    )
    flags = changed.git("ls-files", "-v", "--", "model_repository").split("\n")
    assert flags and all(line.startswith("H ") for line in flags)
    assert changed.git("status", "--porcelain", "--untracked-files=all") == ""
    for key in ("core.bigFileThreshold", "pack.compression"):  # set for the commit's git commands only
        assert subprocess.run(["git", "config", key], cwd=changed.root, capture_output=True).returncode == 1


def test_every_git_command_hashes_undeflated_maps_small_windows_and_repacks_nothing(changed, monkeypatch):
    """GIT_SETTINGS: git hashes a file over core.bigFileThreshold through the deflate it would store
    it with, so every command the tool runs (and its cat-file stream) deflates nothing, repacks
    nothing on its own and maps packs in small windows; the repository's config stays as it was."""
    git = Git(changed.root)
    wanted = {
        "pack.compression": "0",
        "maintenance.auto": "false",
        "gc.auto": "0",
        "core.packedGitWindowSize": "16m",
        "core.packedGitLimit": "64m",
    }
    assert {key: git.text("config", "--get", key) for key in wanted} == wanted
    for key in wanted:
        assert subprocess.run(["git", "config", key], cwd=changed.root, capture_output=True).returncode == 1
    started = []
    real = subprocess.Popen

    def recording(args, *rest, **kwargs):
        started.append(list(args))
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", recording)
    head = git.text("rev-parse", "HEAD")
    weights = git.blob_ids(head, ["model_repository/a/1/weights.bin"])
    with git.cat_file(list(weights.values())) as objects:
        assert [b"".join(chunks) for chunks in objects] == [WEIGHTS]
    assert started and all(args[: 1 + len(GIT_SETTINGS)] == ["git", *GIT_SETTINGS] for args in started)
