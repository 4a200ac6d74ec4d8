"""The revision a benchmark records (bench/revision.py): the full sha of a clean tree, a dirty one
refused unless --allow-dirty (then "<sha>+modified"), the benchmark's own outputs left out; and the
freshness rule of a figures file: every revision recorded an ancestor of HEAD, none modified."""

from __future__ import annotations

import pytest

from bench.revision import MODIFIED, NotACommit, problems, recorded, tree_revision
from support.git import GitRepo


@pytest.fixture
def repo(tmp_path):
    made = GitRepo(tmp_path / "checkout")
    for path in ("src/triton_release/__init__.py", "bench/__init__.py", "pyproject.toml", "README.md"):
        (made.root / path).parent.mkdir(parents=True, exist_ok=True)
        (made.root / path).write_text("# first\n")
    made.commit("first")
    return made


def test_a_clean_tree_records_heads_full_sha(repo):
    assert tree_revision(repo.root) == repo.git("rev-parse", "HEAD") and len(tree_revision(repo.root)) == 40


@pytest.mark.parametrize(
    ("path", "how"),
    [
        ("src/triton_release/__init__.py", "changed"),
        ("bench/__init__.py", "changed"),
        ("pyproject.toml", "changed"),
        ("src/triton_release/new.py", "untracked"),
        ("bench/new_part.py", "untracked"),
    ],
)
def test_a_dirty_tree_is_refused_saying_how_to_go_on_and_marked_with_allow_dirty(repo, path, how):
    (repo.root / path).write_text(f"# {how}\n")
    with pytest.raises(NotACommit) as refused:
        tree_revision(repo.root)
    message = str(refused.value)
    assert path in message and "Commit them" in message and "--allow-dirty" in message
    assert tree_revision(repo.root, allow_dirty=True) == repo.git("rev-parse", "HEAD") + MODIFIED


def test_the_benchmarks_outputs_and_files_outside_the_measured_ones_leave_the_tree_clean(repo):
    (repo.root / "bench" / "results.json").write_text("{}\n")  # the main bench writes it before the latency one
    (repo.root / "bench" / "results.png").write_bytes(b"png")
    (repo.root / "bench" / "latency.png").write_bytes(b"png")
    (repo.root / "README.md").write_text("# changed\n")
    assert tree_revision(repo.root) == repo.git("rev-parse", "HEAD")


def test_a_folder_without_git_history_is_refused(tmp_path):
    with pytest.raises(NotACommit, match="not a git checkout"):
        tree_revision(tmp_path)


def test_figures_of_an_ancestor_of_head_are_fresh(repo):
    measured = repo.git("rev-parse", "HEAD")
    repo.commit("the figures")  # the commit adding the file comes after the one measured
    results = {"revision": measured, "latency": {"revision": measured[:7]}, "scaling": {}}
    assert recorded(results) == {"main figures": measured, "latency": measured[:7]}
    assert problems(results, repo.root) == []


def test_a_modified_revision_a_stranger_and_another_branchs_are_not(repo):
    first = repo.git("rev-parse", "HEAD")
    repo.git("checkout", "-q", "-b", "other")
    other = repo.commit("on another branch")
    repo.git("checkout", "-q", "main")
    results = {
        "revision": first + MODIFIED,
        "fanout": {"revision": "0" * 40},
        "latency": {"revision": other},
        "profile": "full",
    }
    found = problems(results, repo.root)
    assert len(found) == 3
    assert "main figures" in found[0] and "modified tree" in found[0]
    assert "fanout" in found[1] and "not a commit of this repository" in found[1]
    assert "latency" in found[2] and "not an ancestor of HEAD" in found[2]


def test_a_section_without_a_revision_and_the_quick_profile_are_not_fresh(repo):
    found = problems({"profile": "quick", "revision": repo.git("rev-parse", "HEAD")}, repo.root)
    assert found == ["the main figures are a --quick run's (the smoke profile), not a full `make bench`"]
    assert problems({}, repo.root) == ["main figures: no revision recorded"]


def test_a_folder_without_history_fails_the_freshness_check_saying_so(tmp_path):
    found = problems({"revision": "abc"}, tmp_path)
    assert len(found) == 1 and "no git history" in found[0] and "tarball" in found[0]
