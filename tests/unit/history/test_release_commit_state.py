"""`commit` set while git has a merge, cherry-pick, revert or rebase under way: the release is refused
before anything is bumped, built or pushed, naming the operation and how to finish or abandon it (it
bumped, built, tested and pushed, then failed at `git -c ... commit`); and a failed git command
names its subcommand, never the `-c` of the identity added before it."""

from __future__ import annotations

import os
import subprocess

import pytest

from support.models import PYTHON_MODEL, python_model_files
from support.reports import read_report
from triton_release.cli.main import main
from triton_release.history.git import Git, GitFailed, subcommand


@pytest.fixture
def diverged(git_repo):
    """v1.0.0, a change of model a on main, and a branch `other` whose notes.txt conflicts with main's."""
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    git_repo.commit("release 1.0.0")
    git_repo.git("tag", "v1.0.0")
    git_repo.git("checkout", "-q", "-b", "other")
    (git_repo.root / "notes.txt").write_text("other\n")
    git_repo.commit("notes on other")
    git_repo.git("checkout", "-q", "main")
    git_repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit("a: new code")
    (git_repo.root / "notes.txt").write_text("main\n")
    git_repo.commit("notes on main")
    (git_repo.root / "notes.txt").write_text("main, again\n")
    git_repo.commit("notes on main, again")
    return git_repo


def start(repo, operation: str) -> None:
    """Start `operation` and leave it stopped at its conflict, as a user's checkout may be."""
    command = {
        "merge": ["merge", "-q", "other"],
        "cherry-pick": ["cherry-pick", "other"],
        "revert": ["revert", "--no-edit", "HEAD~1"],
        "rebase": ["rebase", "other"],
    }[operation]
    with pytest.raises(subprocess.CalledProcessError):  # git exits 1 at the conflict
        repo.git(*command)


@pytest.mark.parametrize(
    ("operation", "what", "abandon"),
    [
        ("merge", "a merge", "git merge --abort"),
        ("cherry-pick", "a cherry-pick", "git cherry-pick --abort"),
        ("revert", "a revert", "git revert --abort"),
        ("rebase", "a rebase", "git rebase --abort"),
    ],
)
def test_a_release_with_commit_during_an_operation_is_refused_before_the_bump(
    diverged, tmp_path, monkeypatch, operation, what, abandon
):
    start(diverged, operation)
    status = diverged.git("status", "--porcelain", "--untracked-files=all")
    monkeypatch.chdir(diverged.root)
    report = tmp_path / "report.json"
    env = {"HOME": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}  # nothing may be built
    code = main(["release", "--no-push", "--commit", "--base", "v1.0.0", "--report", str(report)], env=env)
    found = read_report(report)
    message = found["error"]["message"]
    assert code == 1, message
    assert f"has {what} under way" in message and abandon in message and "Nothing was bumped" in message
    assert "bump" not in found["steps"]  # refused before it: no version folder written, none undone
    assert not (diverged.models / "a" / "2").exists()
    assert diverged.git("status", "--porcelain", "--untracked-files=all") == status


def test_following_the_advice_releases_again(diverged, tmp_path, monkeypatch):
    """`git merge --abort`, as the message says: the checkout is a release's again."""
    from triton_release.errors import Refused
    from triton_release.history.commit import refuse_pending

    start(diverged, "merge")
    with pytest.raises(Refused, match="git merge --abort"):
        refuse_pending(diverged.models)
    diverged.git("merge", "--abort")
    refuse_pending(diverged.models)  # nothing under way


def test_a_failed_git_command_names_its_subcommand_past_the_identity(git_repo):
    identity = ("-c", "user.name=github-actions[bot]", "-c", "user.email=bot@example.com")
    with pytest.raises(GitFailed, match=r"^git commit failed in "):
        Git(git_repo.root).run(*identity, "commit", "-q", "-m", "nothing staged")
    assert subcommand(("--literal-pathspecs", "ls-tree", "-z", "HEAD")) == "ls-tree"
    assert subcommand(("-C", str(os.sep), "status")) == "status"
