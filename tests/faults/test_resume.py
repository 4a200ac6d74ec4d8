"""After X.Y.Z is in the registry a release is finished forward, never rolled back: a failure
there keeps the bump, and a rerun on a fresh checkout (what CI does) makes the release commit
and its git tag with the very version folders that were shipped."""

from __future__ import annotations

import stat

import pytest

from support.models import PYTHON_MODEL

pytestmark = pytest.mark.integration


def test_a_failure_after_the_push_is_finished_by_a_rerun_with_the_shipped_folders(ws):
    ws.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    ws.commit("a: new code")
    hook = ws.root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'a hook refused the commit' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    try:
        failed = ws.release("--commit")
    finally:
        hook.unlink()
    assert failed.code == 3, failed.out[-3000:]
    assert ws.registry.digest("1.1.0") is not None  # published
    assert "undo-bump" not in failed.report["steps"]
    assert (ws.models / "a" / "2" / "model.py").exists()  # the bump that shipped stays
    shipped = ws.registry.digest("1.1.0")

    ws.git_repo.git("checkout", "-q", "--", ".")  # a fresh checkout of the same commit, as a CI rerun has
    ws.git_repo.git("clean", "-qfd", "model_repository")
    rerun = ws.release("--commit")
    assert rerun.code == 0, rerun.out[-3000:]
    assert rerun.report["steps"]["commit"]["committed"] is True
    assert rerun.report["version"] == "1.1.0"
    assert ws.git_repo.git("log", "-1", "--format=%s") == "release 1.1.0"
    assert ws.git_repo.git("tag", "--points-at", "HEAD") == "v1.1.0"
    assert (ws.models / "a" / "2" / "model.py").read_text().startswith("# 2")  # what 1.1.0 shipped as a/2
    assert (ws.models / "a" / "1" / "model.py").read_text() == PYTHON_MODEL
    assert ws.registry.digest("1.1.0") == shipped == ws.registry.digest("latest")
    assert ws.git_repo.git("status", "--porcelain") == ""
