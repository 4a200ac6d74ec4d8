"""A release never deletes a user's file, ships what was not committed, or commits what it did
not make: the bump, the export that is built, the release commit, and the last release."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.git import GitRepo
from support.models import PYTHON_MODEL, python_model_files
from support.reports import read_report
from triton_release import cache, steps
from triton_release.cli.main import main
from triton_release.errors import InfrastructureError, Refused
from triton_release.files import write_atomic
from triton_release.history.commit import commit
from triton_release.history.git import Git, GitFailed
from triton_release.history.releases import last_release_commit
from triton_release.release import ReleaseRequest, local_candidate
from triton_release.settings import ImageOptions, PublishOptions


@pytest.fixture
def released(git_repo):
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    git_repo.base = git_repo.commit("release")
    git_repo.git("tag", "v1.0.0")
    return git_repo


def change_a(repo: GitRepo) -> str:
    repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    return repo.commit("a: new code")


def planned(repo: GitRepo, head: str = "HEAD"):
    return steps.changes(repo.models, repo.base, head=head)


def files(repo: GitRepo) -> dict:
    return {p.relative_to(repo.root).as_posix(): p.read_bytes() for p in repo.models.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("extra", "state"),
    [
        ({"a/1/weights.bin": b"\x00" * 64}, "ignored by git"),
        ({"a/1/notes.txt": "mine"}, "not tracked by git"),
    ],
)
def test_bump_refuses_files_git_does_not_hold_and_keeps_them(released, extra, state):
    (released.root / ".gitignore").write_text("*.bin\n")
    change_a(released)
    released.write(extra)
    before = files(released)
    with pytest.raises(Refused, match=state):
        steps.bump(released.models, planned(released))
    assert files(released) == before


def test_bump_refuses_an_uncommitted_edit_and_keeps_it(released):
    change_a(released)
    released.write({"a/1/model.py": "# 3, not committed\n" + PYTHON_MODEL})
    before = files(released)
    with pytest.raises(Refused, match="changed and not committed"):
        steps.bump(released.models, planned(released))
    assert files(released) == before


def test_bump_refuses_a_submodule_in_a_version_folder(released, tmp_path):
    other = GitRepo(tmp_path / "other")
    other.write({"weights.txt": "w"})
    other.commit("weights")
    released.git(
        "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(other.root), "model_repository/a/1/vendored"
    )
    released.commit("vendored weights")
    change_a(released)
    with pytest.raises(Refused, match="a git submodule"):
        steps.bump(released.models, planned(released))
    assert (released.models / "a" / "1" / "vendored" / "model_repository" / "weights.txt").exists()


def test_bump_of_another_commit_than_the_checked_out_one_is_refused(released):
    change_a(released)
    released.write({"b/1/model.py": "# 2\n" + PYTHON_MODEL})
    released.commit("b too")
    before = files(released)
    with pytest.raises(Refused, match="Check that commit out first"):
        steps.bump(released.models, planned(released, "HEAD~1"))
    assert files(released) == before


def test_a_staging_folder_left_by_a_killed_run_is_removed_and_never_committed(released):
    change_a(released)
    stale = released.models / "a" / ".triton-release-0123abcd"
    (stale / "new").mkdir(parents=True)
    (stale / "new" / "big.bin").write_bytes(b"\x00" * 1024)
    plan = planned(released)
    bumped = steps.bump(released.models, plan)
    assert not stale.exists()
    released.write({"notes.txt": "untracked, not ours"})
    released.git("add", "model_repository/notes.txt")  # staged by the user: not ours to commit either
    done = commit(released.models, "1.1.0", bumped)
    committed = released.git("show", "--name-only", "--format=", "HEAD").splitlines()
    assert done.committed and sorted(committed) == ["model_repository/a/1/model.py", "model_repository/a/2/model.py"]
    assert "model_repository/notes.txt" in released.git("diff", "--cached", "--name-only")
    assert released.git("tag", "--points-at", "HEAD") == "v1.1.0"


def test_a_release_commit_holds_the_bumped_folders_alone_with_nothing_else_staged(released):
    change_a(released)
    bumped = steps.bump(released.models, planned(released))
    done = commit(released.models, "1.1.0", bumped)
    committed = released.git("show", "--name-only", "--format=%P", "HEAD").split()
    assert done.committed and committed[1:] == ["model_repository/a/1/model.py", "model_repository/a/2/model.py"]
    assert len(committed[0]) == 40 and released.git("status", "--porcelain") == ""  # one parent, all committed


def test_a_staged_submodule_the_config_ignores_is_not_committed_with_the_release(released, tmp_path):
    other = GitRepo(tmp_path / "other")
    other.write({"x/1/model.py": "# elsewhere\n"})
    other.commit("other")
    allowed = ("-c", "protocol.file.allow=always")
    released.git(*allowed, "submodule", "-q", "add", str(other.root), "vendor")
    released.commit("vendor")
    change_a(released)
    plan = planned(released)
    other.write({"x/1/model.py": "# moved on\n"})
    other.commit("moved on")
    released.git("-C", "vendor", "pull", "-q", "--ff-only")
    released.git("add", "vendor")  # a new gitlink staged by the user
    released.git("config", "diff.ignoreSubmodules", "all")
    bumped = steps.bump(released.models, plan)
    commit(released.models, "1.1.0", bumped)
    assert "vendor" not in released.git("show", "--name-only", "--format=", "HEAD").split()
    assert "vendor" in released.git("diff-index", "--cached", "--name-only", "--ignore-submodules=none", "HEAD")


def test_a_release_commit_during_a_merge_is_refused_by_git_as_before(released):
    change_a(released)
    bumped = steps.bump(released.models, planned(released))
    head = released.git("rev-parse", "HEAD")
    (Path(released.root) / ".git" / "MERGE_HEAD").write_text(head + "\n")  # a merge under way
    with pytest.raises(GitFailed, match="partial commit"):
        commit(released.models, "1.1.0", bumped)
    assert released.git("rev-parse", "HEAD") == head


def test_the_export_holds_the_commit_not_the_working_tree(released, tmp_path):
    change_a(released)
    plan = planned(released)
    steps.bump(released.models, plan)
    released.write({"b/1/model.py": "# an edit nobody committed\n" + PYTHON_MODEL, "b/1/extra.txt": "x"})
    shipped = steps.export(released.models, plan, tmp_path / "export")
    assert (shipped.root / "b" / "1" / "model.py").read_text() == PYTHON_MODEL
    assert not (shipped.root / "b" / "1" / "extra.txt").exists()
    assert (shipped.root / "a" / "2" / "model.py").read_text().startswith("# 2")
    assert (shipped.root / "a" / "1" / "model.py").read_text() == PYTHON_MODEL
    assert sorted(shipped.uncommitted) == ["model_repository/b/1/extra.txt", "model_repository/b/1/model.py"]


def test_removing_the_newest_version_folder_is_refused_by_name(released):
    released.write({"a/2/model.py": PYTHON_MODEL})
    released.base = released.commit("a: version 2 released")
    released.remove("a/2")
    released.commit("a: drop version 2")
    with pytest.raises(Refused, match="model_repository/a/2: version 2 of a was released and is removed"):
        planned(released)


def test_a_hotfix_branch_release_does_not_block_the_next_release_of_main(released):
    released.git("checkout", "-q", "-b", "hotfix")
    released.write({"b/1/model.py": "# fix\n" + PYTHON_MODEL})
    released.commit("hotfix")
    released.git("tag", "v1.1.0")
    released.git("checkout", "-q", "main")
    change_a(released)
    last = last_release_commit(None, Git(released.root))
    assert last.commit == "v1.0.0", last.why


def test_a_checkout_folder_of_any_name_makes_a_valid_local_tag(tmp_path):
    request = ReleaseRequest(tmp_path, None, None, "HEAD", ImageOptions("b"), PublishOptions(), False, False)
    for name in ("Ü..Models", "---", "a__b..c"):
        tag = local_candidate(request, Git(tmp_path / name))
        assert tag.split(":")[0].split("/")[1] in ("u-models", "models", "a-b-c")


def test_an_unwritable_cache_folder_is_an_infrastructure_error_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache.configure({"TRITON_RELEASE_CACHE": str(blocker / "cache")})
    try:
        with pytest.raises(InfrastructureError, match="TRITON_RELEASE_CACHE"):
            write_atomic(cache.cache_dir() / "inspect" / "x.json", "{}")
    finally:
        cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})


def test_yaml_aliases_in_the_settings_file_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "triton-release.yaml").write_text("a: &x [1, 2]\nb: [*x, *x]\n")
    (tmp_path / "model_repository").mkdir()
    assert main(["validate", "--report", str(tmp_path / "r.json")], env={"HOME": str(tmp_path)}) == 2
    assert "anchors and aliases" in read_report(tmp_path / "r.json")["error"]["message"]


def test_git_failures_are_infrastructure_errors_not_usage_errors(released):
    with pytest.raises(InfrastructureError):
        Git(released.root).run("cat-file", "-p", "0" * 40)


def test_git_lfs_pointers_in_the_export_are_filled_from_the_lfs_store_or_refused(released, tmp_path):
    import hashlib

    weights = b"\x01\x02" * 4096
    oid = hashlib.sha256(weights).hexdigest()
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(weights)}\n"
    released.write({"a/1/weights.bin": pointer, "a/1/model.py": "# 2\n" + PYTHON_MODEL})
    released.commit("a: weights in LFS")
    plan = planned(released)
    with pytest.raises(Refused, match="git LFS pointer.*git lfs pull"):
        steps.export(released.models, plan, tmp_path / "missing")
    store = released.root / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4]
    store.mkdir(parents=True)
    (store / oid).write_bytes(weights)
    shipped = steps.export(released.models, plan, tmp_path / "export")
    assert (shipped.root / "a" / "2" / "weights.bin").read_bytes() == weights
    (store / oid).write_bytes(b"tampered")
    with pytest.raises(Refused, match="git LFS pointer"):
        steps.export(released.models, plan, tmp_path / "tampered")


def test_the_release_commit_holds_tracked_files_that_gitignore_matches(released):
    (released.root / ".gitignore").write_text("*.bin\n")
    released.write({"a/1/w.bin": b"\x00" * 32})
    released.git("add", "--force", "model_repository/a/1/w.bin", ".gitignore")
    released.commit("weights, force-added")
    released.base = released.git("rev-parse", "HEAD")
    change_a(released)
    plan = planned(released)
    bumped = steps.bump(released.models, plan)
    commit(released.models, "1.1.0", bumped)
    assert "model_repository/a/2/w.bin" in released.git("show", "--name-only", "--format=", "HEAD").splitlines()


def test_a_release_without_bumps_tags_the_commit_released(released):
    released.write({"c/config.pbtxt": "", "c/1/model.py": PYTHON_MODEL})
    head = released.commit("c added")
    released.write({"notes.txt": "later"})
    released.commit("a later commit, checked out")
    done = commit(released.models, "1.1.0", None, head)
    assert not done.committed and released.git("rev-parse", "v1.1.0^{commit}") == head


def test_a_bump_left_behind_counts_only_when_untouched(released):
    from triton_release.history.bump import holds_bump

    change_a(released)
    plan = planned(released)
    steps.bump(released.models, plan)
    assert holds_bump(plan.found, list(plan.bumps), released.models)
    released.write({"a/2/model.py": "# edited after the release\n" + PYTHON_MODEL})
    assert not holds_bump(plan.found, list(plan.bumps), released.models)


def test_an_lfs_pointer_never_names_a_path_to_read(released, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"not yours")
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{secret}\nsize 9\n"
    released.write({"a/1/weights.bin": pointer, "a/1/model.py": "# 2\n" + PYTHON_MODEL})
    released.commit("a pointer with a path for an oid")
    with pytest.raises(Refused, match="git LFS pointer"):
        steps.export(released.models, planned(released), tmp_path / "export")


def test_a_model_repository_at_the_git_root_exports_without_false_warnings(tmp_path):
    repo = GitRepo(tmp_path / "work")
    root = repo.root
    from support.models import write_tree

    write_tree(root, python_model_files("m"))
    base = repo.commit("m")
    write_tree(root, {"m/1/model.py": "# 2\n" + PYTHON_MODEL})
    repo.commit("m: new code")
    plan = steps.changes(root, base, head="HEAD")
    steps.bump(root, plan)
    assert steps.export(root, plan, tmp_path / "export").uncommitted == ()


def test_a_settings_file_that_is_not_utf8_is_a_usage_error(tmp_path):
    from triton_release.errors import UsageError
    from triton_release.settings import resolve

    (tmp_path / "triton-release.yaml").write_bytes(b"channel: \xff\xfe\n")
    with pytest.raises(UsageError, match="not UTF-8"):
        resolve({}, cwd=tmp_path)


@pytest.mark.parametrize("value", ["1b", "5", "32m", "lots"])
def test_a_server_memory_below_64m_or_not_a_size_is_refused_up_front(tmp_path, value):
    from triton_release.errors import UsageError
    from triton_release.settings import resolve

    (tmp_path / "triton-release.yaml").write_text(f"server_memory: {value}\n")
    with pytest.raises(UsageError, match="at least 64m"):
        resolve({}, cwd=tmp_path)
