"""The checkout is built in place only when it is exactly the commit with its bumps: every way it
can differ from what `git archive` gives sends the release back to an unpacked copy."""

from __future__ import annotations

import hashlib
import os

import pytest

from support.git import GitRepo
from support.models import PYTHON_MODEL, python_model_files, write_tree
from triton_release import steps
from triton_release.errors import Refused
from triton_release.history.bump import LFS_POINTER
from triton_release.history.worktree import Export


@pytest.fixture
def bumped(git_repo):
    """A release of a and b, then a's code changed, committed and bumped: a/2 is new."""
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    git_repo.base = git_repo.commit("release")
    git_repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit("a: new code")
    git_repo.plan = steps.changes(git_repo.models, git_repo.base, head="HEAD")
    steps.bump(git_repo.models, git_repo.plan)
    return git_repo


def own_attributes(repo: GitRepo, text: str) -> None:
    (repo.root / ".git" / "info").mkdir(exist_ok=True)
    (repo.root / ".git" / "info" / "attributes").write_text(text)


def shipped(repo: GitRepo, tmp_path, bumped: bool = True) -> Export:
    return steps.export(repo.models, repo.plan, tmp_path / "export", bumped=bumped)


def test_a_clean_checkout_with_its_bumps_is_built_in_place(bumped, tmp_path):
    found = shipped(bumped, tmp_path)
    assert found.in_place and found.root == bumped.models and found.uncommitted == ()
    assert (found.root / "a" / "2" / "model.py").read_text().startswith("# 2")
    assert not (tmp_path / "export").exists()
    steps.still_in_place(found, bumped.plan)  # nothing changed since


def test_bumps_made_in_a_copy_only_are_never_in_place(bumped, tmp_path):
    found = shipped(bumped, tmp_path, bumped=False)
    assert not found.in_place and "bumped in the copy only" in found.unpacked_because


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda r: r.write({"b/1/model.py": "# not committed\n" + PYTHON_MODEL}), "is not as committed"),
        (lambda r: r.write({"b/1/notes.txt": "mine"}), "is not as committed"),
        (
            lambda r: ((r.root / ".gitignore").write_text("*.bin\n"), r.write({"b/1/w.bin": b"\0"})),
            "is not as committed",
        ),
        (lambda r: (r.models / "b" / "1" / "empty").mkdir(), "empty folder"),
        (lambda r: r.git("update-index", "--assume-unchanged", "model_repository/b/1/model.py"), "looks away"),
        (lambda r: r.git("config", "core.fileMode", "false"), "core.fileMode is false"),
        (lambda r: own_attributes(r, "*.py export-subst\n"), "export-subst"),
    ],
)
def test_a_checkout_that_differs_in_any_way_is_unpacked(bumped, tmp_path, spoil, reason):
    spoil(bumped)
    found = shipped(bumped, tmp_path)
    assert not found.in_place and reason in found.unpacked_because
    assert (found.root / "b" / "1" / "model.py").read_text() == PYTHON_MODEL
    assert not (found.root / "b" / "1" / "empty").exists() and not (found.root / "b" / "1" / "notes.txt").exists()


def test_an_lfs_pointer_in_the_checkout_is_unpacked_and_filled(git_repo, tmp_path):
    weights = b"real weights\n"
    oid = hashlib.sha256(weights).hexdigest()
    pointer = LFS_POINTER + f"oid sha256:{oid}\nsize {len(weights)}\n".encode()
    git_repo.write({**python_model_files("a"), "a/1/weights.bin": pointer})
    store = git_repo.root / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4]
    store.mkdir(parents=True)
    (store / oid).write_bytes(weights)
    git_repo.commit("a with an LFS file")
    plan = steps.changes(git_repo.models, None, head="HEAD")
    found = steps.export(git_repo.models, plan, tmp_path / "export", bumped=True)
    assert not found.in_place and "LFS pointer" in found.unpacked_because
    assert (found.root / "a" / "1" / "weights.bin").read_bytes() == weights


def test_a_checkout_edited_while_it_was_read_refuses_the_release(bumped, tmp_path):
    found = shipped(bumped, tmp_path)
    assert found.in_place
    bumped.write({"b/1/model.py": "# an edit during the build\n" + PYTHON_MODEL})
    with pytest.raises(Refused, match="changed while the release built and tested it in place"):
        steps.still_in_place(found, bumped.plan)


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda folder: (folder / "empty").mkdir(), "empty folder"),
        (lambda folder: os.mkfifo(folder / "pipe"), "neither a file nor a folder"),
    ],
)
def test_what_git_status_cannot_see_made_while_the_checkout_was_read_refuses_the_release(
    bumped, tmp_path, spoil, reason
):
    found = shipped(bumped, tmp_path)
    assert found.in_place
    spoil(bumped.models / "b" / "1")  # the check again walks every folder, as the first did
    with pytest.raises(Refused, match=reason):
        steps.still_in_place(found, bumped.plan)


def test_a_bumped_file_turned_into_its_lfs_pointer_while_the_checkout_was_read_refuses_the_release(bumped, tmp_path):
    """git status leaves the bumped folders out: the second pass still looks for LFS pointers."""
    found = shipped(bumped, tmp_path)
    assert found.in_place
    code = (bumped.models / "a" / "2" / "model.py").read_bytes()
    oid = hashlib.sha256(code).hexdigest()  # its object is in no LFS store here
    (bumped.models / "a" / "2" / "model.py").write_bytes(LFS_POINTER + f"oid sha256:{oid}\nsize {len(code)}\n".encode())
    with pytest.raises(Refused, match="LFS pointer"):
        steps.still_in_place(found, bumped.plan)


def test_another_commit_checked_out_is_unpacked(bumped, tmp_path):
    bumped.git("stash", "-u")
    bumped.git("checkout", "-q", bumped.base)
    found = shipped(bumped, tmp_path)
    assert not found.in_place and "another commit" in found.unpacked_because


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        (("config", "core.autocrlf", "true"), "core.autocrlf"),
        (("config", "core.ignoreCase", "true"), "core.ignoreCase is true"),
    ],
)
def test_settings_under_which_a_checkout_may_differ_are_unpacked(bumped, tmp_path, setting, reason):
    bumped.git(*setting)
    found = shipped(bumped, tmp_path)
    assert not found.in_place and reason in found.unpacked_because


def test_converting_attributes_from_any_source_are_unpacked_and_turning_them_off_is_not(bumped, tmp_path):
    own_attributes(bumped, "*.json -text\n*.bin binary\n")
    assert shipped(bumped, tmp_path).in_place
    own_attributes(bumped, "*.py eol=lf\n")
    found = shipped(bumped, tmp_path)
    assert not found.in_place and "eol" in found.unpacked_because


def test_a_bumped_folder_edited_while_it_was_read_refuses_the_release(bumped, tmp_path):
    found = shipped(bumped, tmp_path)
    (bumped.models / "a" / "2" / "model.py").write_text("# swapped during the build\n" + PYTHON_MODEL)
    with pytest.raises(Refused, match="a bumped version folder changed"):
        steps.still_in_place(found, bumped.plan)


def test_a_model_repository_at_the_git_root_is_built_in_place(tmp_path):
    repo = GitRepo(tmp_path / "work")
    repo.models.rmdir()  # the helper's usual folder: here the models sit at the top
    write_tree(repo.root, python_model_files("m"))
    base = repo.commit("m")
    write_tree(repo.root, {"m/1/model.py": "# 2\n" + PYTHON_MODEL})
    repo.commit("m: new code")
    plan = steps.changes(repo.root, base, head="HEAD")
    steps.bump(repo.root, plan)
    found = steps.export(repo.root, plan, tmp_path / "export", bumped=True)
    assert found.in_place, found.unpacked_because


def test_committed_files_in_place_are_named_by_their_git_blob_ids(git_repo, tmp_path):
    git_repo.write({**python_model_files("a"), **python_model_files("c"), "c/1/weights.bin": b"\1" * 4096})
    (git_repo.models / "c" / "1" / "link.bin").symlink_to("weights.bin")
    base = git_repo.commit("release")
    git_repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit("a: new code")
    git_repo.plan = steps.changes(git_repo.models, base, head="HEAD")
    steps.bump(git_repo.models, git_repo.plan)
    found = shipped(git_repo, tmp_path)
    assert found.in_place, found.unpacked_because
    c1 = git_repo.models.resolve() / "c" / "1"
    assert found.blob_ids[str(c1 / "weights.bin")] == git_repo.git("rev-parse", "HEAD:model_repository/c/1/weights.bin")
    assert str(c1 / "model.py") in found.blob_ids and str(c1.parent / "config.pbtxt") in found.blob_ids
    assert str(c1 / "link.bin") not in found.blob_ids  # a link's id is its text, not what a tar reads through
    assert not any("/a/1/" in path or "/a/2/" in path for path in found.blob_ids)  # bumped: read, never named
    git_repo.write({"c/1/model.py": "# not committed\n" + PYTHON_MODEL})
    assert shipped(git_repo, tmp_path).blob_ids == {}  # unpacked: every file is read
