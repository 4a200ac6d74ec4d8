"""What `git status` does not show in a version folder the bump replaces: refused before anything
changes, naming the files and why git did not list them (the bump trusted git status, saw the bytes
differ from the commit, and replaced the folder: the user's bytes were gone, exit 0). A sparse
checkout without the folder is refused with its fix (it ended in "Unexpected error:
FileNotFoundError ... This is a bug", exit 3)."""

from __future__ import annotations

import pytest

from support.models import PYTHON_MODEL, python_model_files
from support.reports import read_report
from triton_release import steps
from triton_release.cli.main import main
from triton_release.errors import Refused


@pytest.fixture
def changed(git_repo):
    """v1.0.0 of models a and b, then a change inside a/1 (a bump moves a/1 to a/2)."""
    git_repo.write({**python_model_files("a"), **python_model_files("b"), "a/1/labels.txt": "cat\ndog\n"})
    git_repo.base = git_repo.commit("release 1.0.0")
    git_repo.git("tag", "v1.0.0")
    git_repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit("a: new code")
    return git_repo


def files(repo) -> dict:
    """Every file under the model repository (a .git of a version folder's own included), as bytes."""
    return {p.relative_to(repo.root).as_posix(): p.read_bytes() for p in repo.models.rglob("*") if p.is_file()}


def bump(repo):
    return steps.bump(repo.models, steps.changes(repo.models, repo.base))


@pytest.mark.parametrize(
    ("flag", "why"),
    [("--skip-worktree", "marked skip-worktree"), ("--assume-unchanged", "marked assume-unchanged")],
)
def test_an_edit_git_status_hides_by_a_flag_is_refused_and_kept(changed, flag, why):
    changed.git("update-index", flag, "model_repository/a/1/labels.txt")
    (changed.models / "a/1/labels.txt").write_text("cat\ndog\nbird, mine\n")
    assert changed.git("status", "--porcelain") == ""  # git does not show it
    before = files(changed)
    with pytest.raises(Refused, match=f"model_repository/a/1/labels.txt \\({why}") as refused:
        bump(changed)
    assert "Nothing was changed" in str(refused.value) and f"git update-index --no-{flag[2:]}" in str(refused.value)
    assert files(changed) == before and not (changed.models / "a" / "2").exists()


def test_following_the_advice_for_a_flagged_edit_releases_it(changed):
    changed.git("update-index", "--skip-worktree", "model_repository/a/1/labels.txt")
    (changed.models / "a/1/labels.txt").write_text("cat\ndog\nbird\n")
    with pytest.raises(Refused):
        bump(changed)
    changed.git("update-index", "--no-skip-worktree", "model_repository/a/1/labels.txt")
    changed.commit("a: a bird too")  # the edit committed, as the message says
    bump(changed)
    assert (changed.models / "a/2/labels.txt").read_text() == "cat\ndog\nbird\n"


def test_lines_a_one_way_clean_filter_strips_are_refused_and_kept(changed):
    """nbstripout and the like: `clean` strips lines before git compares, and there is no smudge."""
    (changed.root / ".gitattributes").write_text("*.txt filter=strip\n")
    changed.git("config", "filter.strip.clean", "grep -v '^#'")
    changed.git("config", "filter.strip.smudge", "cat")
    changed.commit("the strip filter")
    (changed.models / "a/1/labels.txt").write_text("cat\n# a note of mine\ndog\n")
    changed.git("add", "model_repository/a/1/labels.txt")  # git stores what the filter keeps: no change
    assert changed.git("status", "--porcelain") == ""
    before = files(changed)
    with pytest.raises(Refused, match=r"model_repository/a/1/labels.txt \(.*filter=strip"):
        bump(changed)
    assert files(changed) == before


def test_a_git_repository_inside_a_version_folder_is_refused_and_kept(changed):
    own = changed.models / "a" / "1" / ".git"
    own.mkdir()
    (own / "HEAD").write_text("ref: refs/heads/main\n")
    (own / "notes").write_text("mine\n")
    with pytest.raises(Refused, match=r"model_repository/a/1/\.git \(a git repository of its own"):
        bump(changed)
    assert (own / "notes").read_text() == "mine\n" and not (changed.models / "a" / "2").exists()


def test_a_sparse_checkout_without_the_version_folder_is_refused_with_its_fix(changed, tmp_path, monkeypatch):
    changed.git("sparse-checkout", "set", "--cone", "model_repository/b")  # model a left out
    assert not (changed.models / "a" / "1").exists()
    monkeypatch.chdir(changed.root)
    report = tmp_path / "report.json"
    code = main(["bump", "--base", "v1.0.0", "--report", str(report)], env={"HOME": str(tmp_path)})
    message = read_report(report)["error"]["message"]
    assert code == 1, message
    assert "model_repository/a/1 is outside this sparse checkout" in message and "bug" not in message
    assert "git sparse-checkout add model_repository/a" in message
    assert not (changed.models / "a" / "2").exists()
    changed.git("sparse-checkout", "add", "model_repository/a")  # the advice
    assert main(["bump", "--base", "v1.0.0"], env={"HOME": str(tmp_path)}) == 0
    assert (changed.models / "a/2/model.py").read_text().startswith("# 2")


# -- a bump found in the working tree: modes and links count (item 8 of issue 48) ---------------


@pytest.mark.parametrize("how", ["an executable bit", "a link to the same bytes"])
def test_a_found_bump_that_differs_by_mode_or_link_is_not_this_bump(changed, how):
    """N+1 differing from the planned bump only by an executable bit, or by a file replaced with a
    link to the same bytes, is not "holds this bump exactly": git would record other modes."""
    import os

    from triton_release.history.bump import holds_bump

    planned = steps.changes(changed.models, changed.base)
    steps.bump(changed.models, planned)
    assert holds_bump(planned.found, list(planned.writes), changed.models)
    labels = changed.models / "a" / "2" / "labels.txt"
    if how == "an executable bit":
        labels.chmod(0o755)
    else:
        labels.rename(changed.root / "elsewhere.txt")  # the same bytes, behind a link
        os.symlink(os.path.relpath(changed.root / "elsewhere.txt", labels.parent), labels)
    assert labels.read_bytes() == b"cat\ndog\n"
    assert not holds_bump(planned.found, list(planned.writes), changed.models)
