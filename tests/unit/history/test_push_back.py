"""The release commit and its tag pushed back to origin: pushed, or refused with a warning and the
fix (a pre-receive hook, a branch that moved on, no credentials), never an error. A bare origin
made with `git init --bare` in tmp_path, and clones of it."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from support.git import GitRepo
from triton_release.history.commit import Committed
from triton_release.history.push_back import PushTarget, push_release

FIX = "Give the workflow a token that may push to main (permissions: contents: write, or a deploy key)"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def clone(origin: Path, where: Path) -> Path:
    git(origin.parent, "clone", "-q", str(origin), str(where))
    git(where, "config", "user.email", "test@example.com")
    git(where, "config", "user.name", "test")
    return where


@pytest.fixture
def origin(tmp_path) -> Path:
    """A bare origin whose main holds one commit."""
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    seed = clone(bare, tmp_path / "seed")
    (seed / "model_repository").mkdir()
    (seed / "model_repository" / "README").write_text("models\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "models")
    git(seed, "push", "-q", "origin", "main")
    return bare


def release_commit(checkout: Path, version: str = "1.1.0") -> Committed:
    """What the commit step leaves: `release X.Y.Z` committed and tagged vX.Y.Z."""
    (checkout / "model_repository" / "2").mkdir(parents=True, exist_ok=True)
    (checkout / "model_repository" / "2" / "model.py").write_text("# v2\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", f"release {version}")
    git(checkout, "tag", f"v{version}")
    return Committed(True, f"v{version}", git(checkout, "rev-parse", "HEAD"), version)


def origin_has(origin: Path) -> tuple[str, list[str]]:
    return git(origin, "log", "-1", "--format=%s", "main"), git(origin, "tag").split()


def test_the_release_commit_and_tag_reach_the_checked_out_branch(origin, tmp_path, caplog):
    checkout = clone(origin, tmp_path / "work")
    committed = release_commit(checkout)
    result = push_release(checkout / "model_repository", committed, PushTarget())
    assert result.pushed and result.branch == "main" and result.atomic and result.with_commit
    assert result.refs == (f"{committed.commit}:refs/heads/main", "refs/tags/v1.1.0:refs/tags/v1.1.0")
    assert origin_has(origin) == ("release 1.1.0", ["v1.1.0"])
    assert git(origin, "rev-parse", "main") == committed.commit
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert result.to_json()["outcome"] == "pushed"


def test_a_release_that_needed_no_commit_pushes_its_tag_alone(origin, tmp_path):
    checkout = clone(origin, tmp_path / "work")
    git(checkout, "tag", "v1.0.1")
    head = git(checkout, "rev-parse", "HEAD")
    result = push_release(checkout, Committed(False, "v1.0.1", head, "1.0.1"), PushTarget())
    assert result.pushed and not result.with_commit and result.refs == ("refs/tags/v1.0.1:refs/tags/v1.0.1",)
    assert origin_has(origin) == ("models", ["v1.0.1"])


def test_a_pre_receive_hook_that_refuses_is_a_warning_with_the_fix(origin, tmp_path, caplog):
    hook = origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'main is protected: no direct pushes' >&2\nexit 1\n")
    hook.chmod(0o755)
    checkout = clone(origin, tmp_path / "work")
    committed = release_commit(checkout)
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        result = push_release(checkout, committed, PushTarget("main"))
    assert result.outcome == "refused" and not result.pushed
    assert "pre-receive hook declined" in result.reason and "main is protected" in result.reason
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(
        "release 1.1.0 is published, but its release commit and tag v1.1.0 were not pushed to origin main: "
    )
    assert FIX in warning and "or set commit: false" in warning
    assert "the registry keeps the record of released versions" in warning
    assert origin_has(origin) == ("models", [])  # atomic: neither the branch nor the tag moved


def test_a_branch_that_moved_on_is_refused_and_nothing_is_pushed(origin, tmp_path, caplog):
    checkout = clone(origin, tmp_path / "work")
    other = clone(origin, tmp_path / "other")
    (other / "NOTES").write_text("meanwhile\n")
    git(other, "add", "-A")
    git(other, "commit", "-q", "-m", "meanwhile")
    git(other, "push", "-q", "origin", "main")
    committed = release_commit(checkout)
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        result = push_release(checkout, committed, PushTarget("main"))
    assert result.outcome == "refused"
    assert "main [rejected]" in result.reason and (
        "fetch first" in result.reason or "non-fast-forward" in result.reason
    )
    assert any(FIX in r.getMessage() for r in caplog.records)
    assert origin_has(origin) == ("meanwhile", [])


@pytest.mark.parametrize("with_commit", [True, False])
def test_a_tag_that_already_exists_on_origin_is_refused_with_how_to_delete_or_move_it(
    origin, tmp_path, caplog, with_commit
):
    checkout = clone(origin, tmp_path / "work")
    other = clone(origin, tmp_path / "other")
    git(other, "tag", "v1.1.0")  # v1.1.0 reached origin on another commit while the release ran
    git(other, "push", "-q", "origin", "v1.1.0")
    if with_commit:
        committed = release_commit(checkout)
    else:
        (checkout / "NOTES").write_text("another commit\n")
        git(checkout, "add", "-A")
        git(checkout, "commit", "-q", "-m", "notes")
        git(checkout, "tag", "v1.1.0")
        committed = Committed(False, "v1.1.0", git(checkout, "rev-parse", "HEAD"), "1.1.0")
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        result = push_release(checkout, committed, PushTarget("main"))
    assert result.outcome == "refused" and "v1.1.0 [rejected] (already exists)" in result.reason
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "tag v1.1.0 already exists on origin" in warning
    assert "git push origin :refs/tags/v1.1.0" in warning  # delete it there
    assert f"git push --force origin {committed.commit}:refs/tags/v1.1.0" in warning  # or move it
    assert FIX not in warning and "commit: false" not in warning  # no token or setting mends this
    assert origin_has(origin) == ("models", ["v1.1.0"])  # atomic: main did not move either
    assert git(origin, "rev-parse", "v1.1.0^{commit}") == git(other, "rev-parse", "HEAD")


def test_the_branch_named_by_the_workflow_wins_over_the_checkout(origin, tmp_path):
    checkout = clone(origin, tmp_path / "work")
    git(checkout, "checkout", "-q", "--detach")  # as some checkouts leave it
    committed = release_commit(checkout)
    result = push_release(
        checkout, committed, PushTarget.from_env({"GITHUB_REF": "refs/heads/main", "GITHUB_REF_NAME": "main"})
    )
    assert result.pushed and origin_has(origin) == ("release 1.1.0", ["v1.1.0"])


def test_a_detached_head_without_a_branch_name_is_a_warning(origin, tmp_path, caplog):
    checkout = clone(origin, tmp_path / "work")
    git(checkout, "checkout", "-q", "--detach")
    committed = release_commit(checkout)
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        result = push_release(checkout, committed, PushTarget())
    assert result.outcome == "skipped" and result.branch is None
    assert any("HEAD is detached and no branch was named" in r.getMessage() for r in caplog.records)
    assert origin_has(origin) == ("models", [])


def test_a_checkout_without_origin_is_a_warning(tmp_path, caplog):
    alone = GitRepo(tmp_path / "alone").root
    committed = release_commit(alone)
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        result = push_release(alone, committed, PushTarget())
    assert result.outcome == "skipped" and "no remote origin" in result.reason
    assert any("push-commit: false" in r.getMessage() for r in caplog.records)


def test_credentials_in_the_remote_url_never_reach_the_warning_or_the_report(tmp_path, caplog):
    checkout = GitRepo(tmp_path / "work").root
    git(checkout, "remote", "add", "origin", "http://bot:s3cret-token@127.0.0.1:9/models.git")  # nothing listens
    committed = release_commit(checkout)
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        result = push_release(checkout, committed, PushTarget())
    assert result.outcome == "refused" and result.reason
    assert "s3cret-token" not in result.reason and "s3cret-token" not in str(result.to_json())
    assert all("s3cret-token" not in r.getMessage() for r in caplog.records)
    assert any(FIX in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("env", "branch"),
    [
        ({"GITHUB_REF": "refs/heads/main", "GITHUB_REF_NAME": "main", "GITHUB_REF_TYPE": "branch"}, "main"),
        (
            {"GITHUB_REF": "refs/pull/7/merge", "GITHUB_REF_NAME": "7/merge", "GITHUB_HEAD_REF": "feature/x"},
            "feature/x",
        ),
        ({"GITHUB_REF": "refs/tags/v2.0.0", "GITHUB_REF_NAME": "v2.0.0", "GITHUB_REF_TYPE": "tag"}, None),
        ({"GITHUB_REF_NAME": "release/1.x", "GITHUB_REF_TYPE": "branch"}, "release/1.x"),
        ({}, None),
    ],
)
def test_the_branch_comes_from_the_workflow_run(env, branch):
    assert PushTarget.from_env(env) == PushTarget(branch)
