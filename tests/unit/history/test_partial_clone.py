"""A partial clone (`git clone --filter=blob:none`) whose remote is gone: what the bump and the
change detection need of the history and the clone lacks is a named problem with its fix (it was
"git cat-file has no object ..."), and the fix, followed, works."""

from __future__ import annotations

import subprocess

from support.git import GitRepo
from support.models import PYTHON_MODEL, python_config, python_model_files
from support.reports import read_report
from triton_release.cli.main import main


def partial(origin: GitRepo, tmp_path, change: dict) -> tuple[GitRepo, object]:
    """v1.0.0 of model a, `change` committed on top; a blobless clone of it, its origin moved away."""
    origin.git("config", "uploadpack.allowFilter", "true")
    origin.write(python_model_files("a"))
    origin.commit("release 1.0.0")
    origin.git("tag", "v1.0.0")
    origin.write(change)
    origin.commit("a: changed")
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--filter=blob:none", f"file://{origin.root}", str(clone)],
        check=True,
        capture_output=True,
    )
    missing = subprocess.run(
        ["git", "rev-list", "--objects", "--all", "--missing=print"], cwd=clone, capture_output=True, text=True
    ).stdout
    assert "?" in missing  # what v1.0.0 alone holds was never fetched
    moved = tmp_path / "moved"
    origin.root.rename(moved)  # origin is gone
    return GitRepo(clone), moved


def infrastructure_error(tmp_path, *args: str) -> str:
    """The message of the command `args` (run in-process, here), which must exit 3."""
    report = tmp_path / "report.json"
    code = main([*args, "--report", str(report)], env={"HOME": str(tmp_path)})
    message = read_report(report)["error"]["message"]
    assert code == 3, message
    return message


def test_a_bump_needing_an_object_the_partial_clone_lacks_names_it_and_the_fix(git_repo, tmp_path, monkeypatch):
    clone, moved = partial(git_repo, tmp_path, {"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    monkeypatch.chdir(clone.root)
    message = infrastructure_error(tmp_path, "bump", "--base", "v1.0.0")
    assert "model_repository/a/1/model.py" in message and "is not in this partial clone" in message
    assert "git remote set-url origin" in message and "bug" not in message and "cat-file has no object" not in message
    assert not (clone.models / "a" / "2").exists() and clone.git("status", "--porcelain") == ""
    clone.git("remote", "set-url", "origin", f"file://{moved}")  # the advice: origin where it moved
    assert main(["bump", "--base", "v1.0.0"], env={"HOME": str(tmp_path)}) == 0
    assert (clone.models / "a/1/model.py").read_text() == PYTHON_MODEL


def test_a_config_of_the_base_the_partial_clone_lacks_is_named_too(git_repo, tmp_path, monkeypatch):
    """The base's config.pbtxt, read for the release kind (it was an unexpected IndexError, exit 3)."""
    clone, _ = partial(git_repo, tmp_path, {"a/config.pbtxt": python_config("a", max_batch_size=4)})
    monkeypatch.chdir(clone.root)
    message = infrastructure_error(tmp_path, "changed", "--base", "v1.0.0")
    assert "model_repository/a/config.pbtxt at " in message and "is not in this partial clone" in message
    assert "bug" not in message
