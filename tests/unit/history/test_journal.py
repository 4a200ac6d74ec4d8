"""The journal of a bump (history/journal.py), on git repositories made here: a run killed with
its bump in the working tree is recognised, and the next run undoes it, keeps it or drops it."""

from __future__ import annotations

import json
import os

import pytest

from support.models import PYTHON_MODEL, python_model_files
from triton_release import steps
from triton_release.errors import Refused, UsageError
from triton_release.history.git import Git
from triton_release.history.journal import Journal


@pytest.fixture
def changed(git_repo):
    git_repo.write(python_model_files("a"))
    git_repo.base = git_repo.commit("one model")
    git_repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit("a: new code")
    return git_repo


def killed_bump(repo) -> Journal:
    """A bump as a run that was killed right after it left it: the folders and the journal, with
    an owner that no longer runs."""
    steps.bump(repo.models, steps.changes(repo.models, repo.base))
    journal = Journal(Git(repo.root))
    data = json.loads(journal.path.read_text())
    data["owner"] = {**data["owner"], "pid": 2**22 + 7, "started": "1"}  # no such process
    journal.path.write_text(json.dumps(data))
    return journal


def test_a_killed_runs_bump_is_undone_by_the_next_run(changed):
    journal = killed_bump(changed)
    assert (changed.models / "a" / "2").exists()
    found = steps.recover(changed.models, None)
    assert found.action == "undone" and found.folders == ("model_repository/a/1", "model_repository/a/2")
    assert changed.git("status", "--porcelain", "--ignored") == "" and not journal.path.exists()


def test_a_bump_half_made_by_a_kill_between_two_renames_is_undone(changed):
    killed_bump(changed)
    os.rename(changed.models / "a" / "1", changed.models / "a" / ".triton-release-0badf00d")  # moved out, not back
    steps.recover(changed.models, None)
    assert changed.git("status", "--porcelain", "--ignored") == ""


def test_a_folder_changed_after_the_kill_is_refused_and_kept(changed):
    journal = killed_bump(changed)
    (changed.models / "a" / "2" / "mine.txt").write_text("a user's file")
    with pytest.raises(Refused, match="a/2 changed after a run that bumped it was killed"):
        steps.recover(changed.models, None)
    assert (changed.models / "a" / "2" / "mine.txt").exists() and journal.path.exists()


def test_a_run_still_running_is_not_undone(changed):
    steps.bump(changed.models, steps.changes(changed.models, changed.base))  # this process: alive
    with pytest.raises(UsageError, match="is bumping this checkout"):
        steps.recover(changed.models, None)


def test_a_checkout_since_the_kill_drops_the_journal(changed):
    journal = killed_bump(changed)
    changed.git("checkout", "-q", "--", ".")
    changed.git("clean", "-qfdx", "model_repository")
    changed.write({"a/1/model.py": "# 3\n" + PYTHON_MODEL})
    changed.commit("a: newer code")
    assert steps.recover(changed.models, None).action == "gone" and not journal.path.exists()


def test_a_release_commit_left_without_its_tag_is_tagged_and_gits_lock_cleared(changed):
    journal = killed_bump(changed)
    journal.phase("committing", "1.1.0")
    changed.git("add", "-A")
    changed.git("commit", "-q", "-m", "release 1.1.0")
    lock = changed.root / ".git" / "index.lock"
    lock.write_text("")
    assert steps.recover(changed.models, None).action == "tagged"
    assert changed.git("tag", "--points-at", "HEAD") == "v1.1.0" and not lock.exists()


@pytest.mark.parametrize("text", ['{"phase": "bumped", "head": "ab', "[]", ""])
def test_an_unreadable_journal_is_dropped_and_its_bump_known_by_content_and_undone(changed, text):
    """A journal cut short or of another shape: the next run drops it, recognises the bump it
    left by its contents (exactly what it would write), and undoes it like one it wrote."""
    journal = killed_bump(changed)
    journal.path.write_text(text)
    found = steps.recover(changed.models, None)
    assert found is not None and found.action == "dropped" and not journal.path.exists()
    planned = steps.changes(changed.models, changed.base)
    again = steps.bump(changed.models, planned, held_is_ours=True)
    assert again.written and journal.path.exists()  # this run's now: undone if it releases nothing
    steps.undo_bump(changed.models, planned)
    assert changed.git("status", "--porcelain", "--ignored") == "" and not journal.path.exists()


def test_a_users_own_bump_is_used_as_found_and_left_so(changed):
    """`triton-release bump` ends with no journal: a later release takes the folders as the user's,
    uses them (they are exactly its bump) and undoes nothing of them."""
    from triton_release.cli.main import main

    assert main(["bump", "--base", changed.base, "--model-repository", str(changed.models)]) == 0
    journal = Journal(Git(changed.root))
    assert not journal.path.exists() and (changed.models / "a" / "2").is_dir()
    assert steps.recover(changed.models, None) is None  # nothing a killed run left
    before = changed.git("status", "--porcelain")
    planned = steps.changes(changed.models, changed.base)
    found = steps.bump(changed.models, planned)
    assert found.found and not found.written and not journal.path.exists()
    assert changed.git("status", "--porcelain") == before


def test_a_bump_with_other_contents_than_the_planned_one_is_still_refused(changed):
    planned = steps.changes(changed.models, changed.base)
    steps.bump(changed.models, planned)
    Journal.around(changed.models).end()
    (changed.models / "a" / "2" / "mine.txt").write_text("a user's file")
    with pytest.raises(Refused, match="already exists in the working tree|Commit them"):
        steps.bump(changed.models, steps.changes(changed.models, changed.base))


def test_a_release_commit_journal_whose_release_was_wiped_from_the_registry_undoes_the_bump(changed):
    """Phase committing, and the registry no longer holds X.Y.Z (wiped): nothing of it is out, so
    the bump is undone instead of being kept for a commit forever."""
    from support.registries import FakeRegistry

    journal = killed_bump(changed)
    with FakeRegistry(auth=False, tags=()) as fake:
        data = json.loads(journal.path.read_text())
        journal.path.write_text(json.dumps({**data, "release": f"{fake.address}/team/models"}))
        journal.phase("committing", "1.1.0")
        found = steps.recover(changed.models, None)
    assert found.action == "undone" and not journal.path.exists()
    assert changed.git("status", "--porcelain", "--ignored") == ""
