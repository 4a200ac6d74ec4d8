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


def test_with_core_filemode_false_the_release_commit_holds_the_modes_the_image_holds(git_repo):
    """Windows, WSL, some CI: `git add` stages a new file as 100644 there, so the release commit
    recorded a/2's executable as 100644 while the image held 100755 (and every later release bumped
    the model again, its tree no longer the released one)."""
    from support.models import PYTHON_MODEL
    from triton_release import steps
    from triton_release.history.commit import commit

    git_repo.write({**python_model_files("a"), "a/1/run.sh": "#!/bin/sh\necho hi\n"})
    git_repo.git("add", "-A")
    git_repo.git("update-index", "--chmod=+x", "model_repository/a/1/run.sh")
    git_repo.git("commit", "-q", "-m", "release 1.0.0")
    base = git_repo.git("rev-parse", "HEAD")
    git_repo.git("config", "core.fileMode", "false")
    git_repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit("a: new code")
    planned = steps.changes(git_repo.models, base)
    done = commit(git_repo.models, "1.1.0", steps.bump(git_repo.models, planned), planned.found.head)
    assert done.committed
    modes = {
        line.split("\t")[1]: line.split()[0]
        for line in git_repo.git("ls-tree", "-r", "HEAD", "model_repository/a").splitlines()
    }
    assert modes["model_repository/a/2/run.sh"] == "100755" and modes["model_repository/a/1/run.sh"] == "100755"
    assert modes["model_repository/a/2/model.py"] == "100644"
    assert git_repo.git("rev-parse", "HEAD:model_repository/a/2") == git_repo.git(
        "rev-parse", "HEAD~1:model_repository/a/1"
    )  # the new version's tree is the one the image was built from
