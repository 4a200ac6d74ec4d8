"""What the checkout holds that no commit does is left out of a change, and `changed` and `release`
say so: models copied in but never committed, and edits of committed ones, are named as not
committed, beside "no model changed", instead of a silent "no model changed"."""

from __future__ import annotations

from support.models import PYTHON_MODEL, python_model_files
from support.reports import read_report
from triton_release.cli import main


def run(repo, tmp_path, monkeypatch, capsys, *args: str) -> tuple[int, str, dict]:
    monkeypatch.chdir(repo.root)
    report = tmp_path / "report.json"
    env = {"HOME": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"}  # nothing may be built
    code = main([*args, "--report", str(report)], env=env)
    out = capsys.readouterr()
    return code, out.out + out.err, read_report(report)


def test_models_copied_in_but_not_committed_are_named(git_repo, tmp_path, monkeypatch, capsys):
    git_repo.write({"README.md": "models come later\n"})
    base = git_repo.commit("start")
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    code, printed, report = run(git_repo, tmp_path, monkeypatch, capsys, "changed", "--base", base)
    assert code == 0, printed
    assert "not committed, so left out of the change (no committed change was found)" in printed
    assert (
        "model_repository/a/ (not tracked by git)" in printed and "model_repository/b/ (not tracked by git)" in printed
    )
    assert "commit them (git add, git commit)" in printed
    assert "no model changed in the commits compared" in printed
    assert report["steps"]["changed"]["uncommitted"] == [
        "model_repository/a/ (not tracked by git)",
        "model_repository/b/ (not tracked by git)",
    ]


def test_uncommitted_edits_alone_are_named_when_nothing_is_released(git_repo, tmp_path, monkeypatch, capsys):
    git_repo.write(python_model_files("a"))
    base = git_repo.commit("a")
    (git_repo.models / "a/1/model.py").write_text(PYTHON_MODEL.replace("+ 1", "+ 2"))
    code, printed, _ = run(git_repo, tmp_path, monkeypatch, capsys, "release", "--no-push", "--base", base)
    assert code == 0, printed
    assert "model_repository/a/1/model.py (changed)" in printed and "not committed, so left out" in printed
    assert "no model changed: nothing built, nothing pushed (1 uncommitted path(s) left out, named above)" in printed


def test_a_clean_checkout_says_nothing_of_it(git_repo, tmp_path, monkeypatch, capsys):
    git_repo.write(python_model_files("a"))
    base = git_repo.commit("a")
    code, printed, report = run(git_repo, tmp_path, monkeypatch, capsys, "changed", "--base", base)
    assert code == 0 and "not committed" not in printed and report["steps"]["changed"]["uncommitted"] == []
