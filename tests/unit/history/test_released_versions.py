"""The registry's record of released versions (history/released_versions.py), on git repositories made here
and a registry stand-in that answers tags and labels: what a fresh checkout lacks is carried,
a change is numbered after the highest released version, and a released version is never
changed."""

from __future__ import annotations

import json

import pytest
import semver

from support.models import PYTHON_MODEL, python_model_files
from triton_release import steps
from triton_release.contract import RELEASED_VERSIONS_LABEL, REVISION_LABEL, is_ledger_tag
from triton_release.errors import Interrupted, Refused
from triton_release.history import released_versions
from triton_release.history.git import Git
from triton_release.history.journal import Journal
from triton_release.history.planned import ChangesResult
from triton_release.registry.client import Manifest, content_digest
from triton_release.registry.ledger import Ledger, enter, intend, read_ledger, write_entry
from triton_release.steps import commit as steps_commit
from triton_release.steps.commit import as_recorded


class Registry:
    """What `changes` reads of a registry repository: its tags, each release's labels, and the
    ledger (registry/ledger.py, kept here as the registry keeps it: a manifest and blobs)."""

    def __init__(self, ledger: bool = False) -> None:
        self.labels: dict[str, dict] = {}
        self.keeps_ledger = ledger
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, Manifest] = {}

    def release(self, version: str, revision: str, planned: ChangesResult | dict) -> None:
        shipped = planned if isinstance(planned, dict) else planned.record
        self.labels[version] = {
            REVISION_LABEL: revision,
            RELEASED_VERSIONS_LABEL: released_versions.label(dict(shipped)),
        }
        if self.keeps_ledger:  # as a push does: the build entered, put up, then confirmed
            built = self.image(version)
            intend(self, version, revision, built.config_digest)
            self.manifests[version] = self.manifests[built.digest] = built
            enter(self, version, self.labels[version], built.config_digest, built.digest)

    def image(self, version: str, extra: str = "") -> Manifest:
        """A release image's manifest: its config named after what was built."""
        config = content_digest(f"the build of {version}{extra}".encode())
        return Manifest.of(
            "application/vnd.oci.image.manifest.v1+json", json.dumps({"config": {"digest": config}}).encode()
        )

    def tags(self) -> list[str]:
        return [*self.labels, *(t for t in self.manifests if is_ledger_tag(t))]

    def image_config(self, reference: str) -> dict:
        tag = next((t for t in self.labels if (m := self.manifests.get(t)) and m.digest == reference), reference)
        return {"config": {"Labels": self.labels[tag]}}

    def manifest(self, reference: str) -> Manifest | None:
        return self.manifests.get(reference)

    def put_manifest(self, tag: str, manifest: Manifest) -> str:
        self.manifests[tag] = manifest
        return manifest.digest

    def put_blob(self, data: bytes) -> str:
        self.blobs[content_digest(data)] = data
        return content_digest(data)

    def blob(self, digest: str) -> bytes:
        return self.blobs[digest]

    def __str__(self) -> str:
        return "127.0.0.1:5000/team/models"


def edit(repo, model: str, version: int, line: str) -> str:
    path = repo.models / model / str(version) / "model.py"
    path.write_text(path.read_text() + line)
    return repo.commit(f"{model}: {line.strip()}")


def content(repo, model: str, version: int) -> str:
    return (repo.models / model / str(version) / "model.py").read_text()


@pytest.fixture
def runner(git_repo):
    """Releases as fresh checkouts make them: the bump of each release is never committed."""
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    first = git_repo.commit("two models")
    registry = Registry()
    registry.release("1.0.0", first, steps.changes(git_repo.models, None, plan=True, registry=registry))
    return git_repo, registry


def plan(repo, registry):
    return steps.changes(repo.models, None, plan=True, registry=registry)


def test_a_fresh_checkout_gets_every_released_version_and_the_next_number(runner):
    repo, registry = runner
    second = edit(repo, "a", 1, "# one\n")
    planned = plan(repo, registry)
    assert [(b.model, b.from_version, b.to_version) for b in planned.bumps] == [("a", 1, 2)]
    assert planned.carried == () and planned.plan.version == "1.1.0"
    registry.release("1.1.0", second, planned)  # and the runner's bump dies with it

    edit(repo, "a", 1, "# two\n")
    planned = plan(repo, registry)
    assert [(b.model, b.from_version, b.to_version) for b in planned.bumps] == [("a", 1, 3)]
    assert [(c.model, c.version, c.at_head) for c in planned.carried] == [("a", 2, False)]
    assert planned.plan.version == "1.2.0"
    steps.bump(repo.models, planned)
    assert content(repo, "a", 1) == PYTHON_MODEL  # as 1.0.0 shipped it
    assert content(repo, "a", 2) == PYTHON_MODEL + "# one\n"  # as 1.1.0 shipped it
    assert content(repo, "a", 3) == PYTHON_MODEL + "# one\n# two\n"
    assert dict(planned.record["a"]) == {
        **released_versions.parse(registry.labels["1.1.0"][RELEASED_VERSIONS_LABEL])["a"],
        3: planned.bumps[0].new_tree,
    }
    steps.undo_bump(repo.models, planned)
    assert repo.git("status", "--porcelain") == ""


def test_a_model_that_did_not_change_keeps_its_released_versions_and_is_not_bumped(runner):
    repo, registry = runner
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))
    edit(repo, "b", 1, "# b changes\n")
    planned = plan(repo, registry)
    assert [b.model for b in planned.bumps] == ["b"]
    # git's a/1 holds what 1.1.0 shipped as a/2: a/1 gets its own contents back, a/2 is carried
    assert sorted((c.model, c.version, c.at_head) for c in planned.carried) == [("a", 1, True), ("a", 2, False)]
    assert planned.found.to_test == ["b"]


def test_a_released_version_held_with_other_bytes_is_refused_naming_the_release(runner):
    repo, registry = runner
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))
    repo.write({"a/2/model.py": PYTHON_MODEL + "# one, then more\n"})  # a bump made by hand, a/1 left edited
    repo.commit("a: version 2 by hand")
    with pytest.raises(
        Refused,
        match=r"version 1 of a was released in 127.0.0.1:5000/team/models:1.1.0 with "
        r"other\s+contents",
    ):
        plan(repo, registry)


def test_a_version_number_below_the_released_ones_is_refused(runner):
    repo, registry = runner
    registry.release(
        "1.1.0",
        repo.git("rev-parse", "HEAD"),
        {"a": {1: (one := released_versions.trees_at(Git(repo.root), "HEAD", "model_repository")["a"][1]), 3: one}},
    )
    repo.write({"a/2/model.py": PYTHON_MODEL + "# new\n"})
    repo.commit("a: version 2")
    with pytest.raises(Refused, match="Name the new version\\s+4"):
        plan(repo, registry)


def test_a_record_naming_contents_git_never_held_is_refused_before_anything_is_written(runner):
    repo, registry = runner
    trees = released_versions.trees_at(Git(repo.root), "HEAD", "model_repository")
    registry.release("1.1.0", repo.git("rev-parse", "HEAD"), {"a": {**trees["a"], 2: "1" * 40}, "b": trees["b"]})
    edit(repo, "b", 1, "# b\n")
    with pytest.raises(Refused, match="git never held") as refused:
        plan(repo, registry)
    assert "model_repository/a/2 as git tree 111111111111" in " ".join(str(refused.value).split())
    assert repo.git("status", "--porcelain") == ""


def test_a_forged_record_giving_one_model_anothers_tree_is_refused(runner):
    """The label rewritten registry-side so that a/1 is b/1's tree, a tree the clone holds: b's code
    would ship as a/1, untested. git never held that tree under a/, so the record is refused."""
    repo, registry = runner
    trees = released_versions.trees_at(Git(repo.root), "HEAD", "model_repository")
    edit(repo, "b", 1, "# b's own\n")
    b_tree = released_versions.trees_at(Git(repo.root), "HEAD", "model_repository")["b"][1]
    registry.release("1.1.0", repo.git("rev-parse", "HEAD"), {"a": {1: b_tree}, "b": {1: b_tree}})
    assert b_tree != trees["a"][1]
    with pytest.raises(Refused, match="rewritten after the release") as refused:
        plan(repo, registry)
    assert "model_repository/a/1" in str(refused.value) and "model_repository/b/1" not in str(refused.value)


def test_a_record_that_cannot_be_read_or_has_no_revision_is_not_trusted(runner):
    repo, registry = runner
    first = repo.git("rev-parse", "HEAD")
    registry.labels["1.1.0"] = {REVISION_LABEL: first, RELEASED_VERSIONS_LABEL: '{"a": {"1": '}
    with pytest.raises(Refused, match="cannot be read"):
        plan(repo, registry)
    registry.labels["1.1.0"] = {RELEASED_VERSIONS_LABEL: registry.labels["1.0.0"][RELEASED_VERSIONS_LABEL]}
    with pytest.raises(Refused, match=r"cannot\s+be\s+proven"):
        plan(repo, registry)


def test_the_release_commit_made_later_holds_exactly_what_the_release_shipped(runner):
    """A rerun that finishes an uncommitted release writes its record, not a bump redone from git."""
    repo, registry = runner
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))
    shipped = released_versions.parse(registry.labels["1.1.0"][RELEASED_VERSIONS_LABEL])
    redo = as_recorded(repo.models, second, shipped, "team/models:1.1.0")
    assert sorted((c.model, c.version, c.at_head) for c in redo.carried) == [("a", 1, True), ("a", 2, False)]
    committed = steps.commit_shipped(repo.models, "1.1.0", redo, "team/models:1.1.0")
    assert committed.committed and repo.git("tag", "--list", "v*") == "v1.1.0"
    assert released_versions.trees_at(Git(repo.root), "v1.1.0", "model_repository") == shipped
    assert repo.git("status", "--porcelain") == ""
    assert not Journal.left_in(repo.models)  # committed: no later run takes the bump for a stopped one's


def test_a_signal_while_the_release_commit_is_finished_says_the_rerun_finishes_it(runner, monkeypatch):
    """Stopped between the redone bump and its commit: the release is out, so the message names it
    and the journal stays (phase committing) for the rerun to finish; never 'nothing was done'."""
    repo, registry = runner
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))
    shipped = released_versions.parse(registry.labels["1.1.0"][RELEASED_VERSIONS_LABEL])
    redo = as_recorded(repo.models, second, shipped, "team/models:1.1.0")

    def stopped(*_args, **_kwargs):
        raise Interrupted("SIGTERM", 143)

    monkeypatch.setattr(steps_commit, "commit", stopped)
    with pytest.raises(Interrupted) as caught:
        steps.commit_shipped(repo.models, "1.1.0", redo, "team/models:1.1.0")
    assert caught.value.published == "team/models:1.1.0"
    entry = Journal.around(repo.models).read()
    assert entry is not None and (entry.phase, entry.version) == ("committing", "1.1.0")


def test_a_release_without_a_record_is_planned_from_git_as_before(git_repo):
    git_repo.write(python_model_files("a"))
    first = git_repo.commit("one model")
    registry = Registry()
    registry.labels["1.0.0"] = {REVISION_LABEL: first}
    edit(git_repo, "a", 1, "# one\n")
    planned = plan(git_repo, registry)
    assert [(b.model, b.from_version, b.to_version) for b in planned.bumps] == [("a", 1, 2)]
    assert planned.carried == () and set(planned.record["a"]) == {1, 2}


def test_the_record_label_round_trips_and_a_foreign_one_is_ignored():
    shipped = {"a": {1: "a" * 40, 2: "b" * 40}}
    assert released_versions.parse(released_versions.label(shipped)) == shipped
    for text in (None, "", "[1, 2]", "{not json", '{"a": {"x": "y"}}'):
        assert released_versions.parse(text) is None


def test_following_the_refusals_advice_converges(runner):
    """The refusal of an edited released version says how to give it back its released bytes:
    done as said, the next release ships it unchanged and numbers the change after the newest."""
    import re
    import shutil
    import subprocess

    repo, registry = runner
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))
    repo.write({"a/2/model.py": PYTHON_MODEL + "# one, then more\n"})
    repo.commit("a: version 2 by hand, version 1 left edited")
    with pytest.raises(Refused) as refused:
        plan(repo, registry)
    command = re.search(r"`(git archive \S+ \| tar -x -C \S+)`", refused.value.message).group(1)
    shutil.rmtree(repo.models / "a" / "1")
    (repo.models / "a" / "1").mkdir()
    subprocess.run(["bash", "-c", command], cwd=repo.root, check=True)  # as the message says, from the top
    repo.commit("a: version 1 as released")
    planned = plan(repo, registry)
    assert [(b.model, b.from_version, b.to_version) for b in planned.bumps] == [("a", 2, 3)]
    assert content(repo, "a", 1) == PYTHON_MODEL


# -- the history the record needs: shallow clones, moved tags, a revision never pushed ------------


def shallow_clone(repo, tmp_path, name: str = "shallow"):
    """A depth-1 clone of `repo`, as actions/checkout makes it by default."""
    import subprocess

    from support.git import GitRepo

    clone = tmp_path / name
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", "--no-tags", f"file://{repo.root}", str(clone)],
        check=True,
        capture_output=True,
    )
    return GitRepo(clone)


def test_a_shallow_clone_is_fetched_whole_and_plans_as_a_full_clone(runner, tmp_path):
    repo, registry = runner
    edit(repo, "a", 1, "# one\n")
    full = plan(repo, registry)
    clone = shallow_clone(repo, tmp_path)
    assert clone.git("rev-parse", "--is-shallow-repository") == "true"
    planned = plan(clone, registry)
    assert clone.git("rev-parse", "--is-shallow-repository") == "false"
    assert planned.found.base == full.found.base and sorted(planned.found.models) == ["a"]
    assert planned.found.models["a"].status == "modified" and planned.plan.version == "1.1.0"
    assert any("shallow clone" in w for w in planned.warnings)


def test_a_shallow_clone_that_cannot_be_fetched_is_refused_before_anything_with_the_fix(runner, tmp_path):
    from triton_release.errors import UsageError

    repo, registry = runner
    edit(repo, "a", 1, "# one\n")
    clone = shallow_clone(repo, tmp_path)
    clone.git("remote", "set-url", "origin", f"file://{tmp_path}/no-such-origin")
    with pytest.raises(UsageError, match="shallow clone") as refused:
        plan(clone, registry)
    assert "fetch-depth: 0" in str(refused.value) and "git fetch --unshallow --tags" in str(refused.value)
    assert clone.git("status", "--porcelain") == ""
    clone.git("remote", "set-url", "origin", f"file://{repo.root}")  # the remote answers again
    clone.git("fetch", "--unshallow", "--tags")  # the advice, as printed
    assert plan(clone, registry).plan.version == "1.1.0"


def test_a_registry_release_whose_commit_never_reached_origin_is_refused_naming_it(runner):
    """Not 'fetch deeper': the clone is whole, the commit was never pushed."""
    repo, registry = runner
    edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", "f" * 40, plan(repo, registry))
    with pytest.raises(Refused, match="never reached origin") as refused:
        plan(repo, registry)
    assert "git push origin ffffffffffff" in str(refused.value) and "fetch-depth" not in str(refused.value)


def test_following_the_never_reached_origin_advice_converges(runner, tmp_path):
    """A release made from a local commit never pushed: a fresh clone is refused until that commit is
    pushed, as the message says; then it plans from it."""
    import subprocess

    from support.git import GitRepo

    repo, registry = runner
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.root), str(bare)], check=True)
    local = edit(repo, "a", 1, "# released from here, never pushed\n")
    registry.release("1.1.0", local, plan(repo, registry))
    subprocess.run(["git", "clone", "-q", str(bare), str(tmp_path / "fresh")], check=True, capture_output=True)
    clone = GitRepo(tmp_path / "fresh")
    with pytest.raises(Refused, match="never reached origin"):
        plan(clone, registry)
    repo.git("push", "-q", str(bare), f"{local}:refs/heads/main")  # the advice: push it
    clone.git("pull", "-q", "--ff-only", "origin", "main")
    planned = plan(clone, registry)
    assert planned.found.base == local and planned.plan.version is None  # nothing changed since 1.1.0


def test_a_git_tag_moved_by_hand_loses_to_the_registrys_revision_with_a_warning(runner):
    repo, registry = runner
    first = repo.git("rev-parse", "HEAD")
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))
    repo.git("tag", "v1.1.0", first)  # moved onto an older commit
    planned = plan(repo, registry)
    assert planned.found.base == second and planned.plan.version is None  # nothing changed since 1.1.0
    assert any("git tag v1.1.0 points at" in w and "was moved" in w for w in planned.warnings)


def test_the_tools_own_release_commit_after_a_moved_tags_revision_is_no_change(runner):
    """`v1.1.0` moved by hand onto the first commit, then a rerun with nothing changed: the base is
    the revision the registry's 1.1.0 names, and the `release 1.1.0` commit made on it (the tool's
    own bump) is no change: nothing is released (it was read as a change, and 1.2.0 released)."""
    from triton_release.history.commit import commit

    repo, registry = runner
    first = repo.git("rev-parse", "HEAD")
    second = edit(repo, "a", 1, "# one\n")
    planned = plan(repo, registry)
    registry.release("1.1.0", second, planned)
    done = commit(repo.models, "1.1.0", steps.bump(repo.models, planned), second)
    assert done.committed and repo.git("log", "-1", "--format=%s") == "release 1.1.0"
    repo.git("tag", "-f", "v1.1.0", first)  # moved by hand onto the first commit
    again = plan(repo, registry)
    assert again.plan.version is None and again.found.models == {}, again.found.models
    assert again.found.base == done.commit
    assert any("git tag v1.1.0 points at" in w and "was moved" in w for w in again.warnings)
    repo.git("tag", "-d", "v1.1.0")  # deleted rather than moved: the same
    assert plan(repo, registry).plan.version is None


def test_a_later_change_after_the_release_commit_is_still_a_change(runner):
    from triton_release.history.commit import commit

    repo, registry = runner
    first = repo.git("rev-parse", "HEAD")
    second = edit(repo, "a", 1, "# one\n")
    planned = plan(repo, registry)
    registry.release("1.1.0", second, planned)
    commit(repo.models, "1.1.0", steps.bump(repo.models, planned), second)
    repo.git("tag", "-f", "v1.1.0", first)
    edit(repo, "b", 1, "# b\n")
    again = plan(repo, registry)
    assert sorted(again.found.models) == ["b"] and again.plan.version == "1.2.0"


def test_a_release_commit_tagged_on_its_revision_is_the_base_without_a_warning(runner):
    repo, registry = runner
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))
    (repo.models / "README").write_text("the bump\n")
    repo.commit("release 1.1.0")
    repo.git("tag", "v1.1.0")
    planned = plan(repo, registry)
    assert planned.base_from.startswith("git tag v1.1.0") and planned.warnings == ()


# -- the ledger: every release ever issued, every version ever shipped -----------------------------


@pytest.fixture
def ledgered(git_repo):
    """As `runner`, with a registry that keeps the ledger, as every push now writes it."""
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    first = git_repo.commit("two models")
    registry = Registry(ledger=True)
    registry.release("1.0.0", first, plan(git_repo, registry))
    return git_repo, registry


def test_a_removed_and_re_added_model_continues_above_its_released_versions(ledgered):
    repo, registry = ledgered
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))  # a/1, a/2
    repo.remove("a")
    third = repo.commit("a: removed")
    removed = plan(repo, registry)
    assert removed.plan.version == "2.0.0" and "a" not in removed.record
    registry.release("2.0.0", third, removed)
    repo.write({**python_model_files("a"), "a/1/model.py": "# a new a\n" + PYTHON_MODEL})
    repo.commit("a: re-added, other code")
    planned = plan(repo, registry)
    assert [(b.model, b.from_version, b.to_version) for b in planned.bumps] == [("a", 1, 3)]
    assert [(c.model, c.version) for c in planned.carried] == [("a", 2)]
    steps.bump(repo.models, planned)
    assert content(repo, "a", 1) == PYTHON_MODEL  # as 1.0.0 shipped it: a/1 is never other bytes
    assert content(repo, "a", 3).startswith("# a new a")


def test_a_release_deleted_by_hand_is_never_reissued(ledgered):
    repo, registry = ledgered
    second = edit(repo, "a", 1, "# one\n")
    registry.release("1.1.0", second, plan(repo, registry))
    del registry.labels["1.1.0"]  # deleted from the registry by hand: the newest image, and its record
    edit(repo, "b", 1, "# b\n")
    planned = plan(repo, registry)
    assert planned.plan.version == "1.2.0" and planned.plan.previous == "1.1.0"
    assert planned.found.base == second
    assert any("1.1.0 was released" in w and "gone from the registry" in w for w in planned.warnings)
    assert ("a", 2) in [(c.model, c.version) for c in planned.carried]  # what 1.1.0 shipped, kept


def test_every_release_deleted_by_hand_is_still_not_a_first_release(ledgered):
    repo, registry = ledgered
    registry.labels.clear()
    edit(repo, "a", 1, "# one\n")
    planned = plan(repo, registry)
    assert planned.plan.version == "1.1.0" and sorted(planned.found.models) == ["a"]


def test_a_forged_ledger_is_refused(ledgered):
    repo, registry = ledgered
    ledger = read_ledger(registry)
    b_tree = ledger.versions["b"][1]
    forged = Ledger(ledger.entries, {**ledger.versions, "c": {1: b_tree}}).intending("1.0.1", "c", "sha256:" + "0" * 64)
    write_entry(registry, "triton-release.ledger.1.0.1.entered-" + "0" * 12, forged)  # an entry of its own
    edit(repo, "a", 1, "# one\n")
    with pytest.raises(Refused, match="ledger") as refused:
        plan(repo, registry)
    assert "git never held" in " ".join(str(refused.value).split())


def test_an_unreadable_ledger_is_refused_not_taken_for_none(ledgered):
    repo, registry = ledgered
    registry.manifests["triton-release.ledger"] = Manifest.of("application/vnd.oci.image.manifest.v1+json", b"[]")
    with pytest.raises(Refused, match="cannot be read"):
        plan(repo, registry)


def test_the_ledger_refuses_a_release_changing_a_released_version():
    ledger = Ledger().confirming("1.0.0", "c1", "sha256:c", "sha256:d", {"a": {1: "t1"}})
    later = ledger.confirming("1.1.0", "c2", "sha256:e", "sha256:f", {"a": {1: "t1", 2: "t2"}})
    assert later.versions == {"a": {1: "t1", 2: "t2"}}
    with pytest.raises(Refused, match="released versions never change"):
        ledger.confirming("1.1.0", "c2", "sha256:e", "sha256:f", {"a": {1: "t9"}})
    assert Ledger.from_json(later.to_json()) == later
    assert ledger.intending("1.1.0", "c2", "sha256:e").releases == {"1.0.0": "c1"}  # pending: not issued


def test_only_a_release_the_ledger_says_this_tool_pushed_is_finished(ledgered):
    from triton_release.registry.ledger import check_built_here

    repo, registry = ledgered
    head = repo.git("rev-parse", "HEAD")
    ours = registry.manifests["1.0.0"]
    check_built_here(registry, "1.0.0", ours.digest, head)  # confirmed by its push
    forged = registry.image("1.0.0", "with one ENV more")
    registry.manifests[forged.digest] = forged
    with pytest.raises(Refused, match="not a proven build of commit") as refused:
        check_built_here(registry, "1.0.0", forged.digest, head)  # another manifest under 1.0.0
    assert "no tag moved onto it" in " ".join(str(refused.value).split())
    with pytest.raises(Refused, match="the ledger has no entry for it"):
        check_built_here(registry, "1.1.0", ours.digest, head)  # pushed by someone else, never entered


def test_a_push_stopped_between_its_put_and_its_confirmation_is_proven_and_confirmed(ledgered):
    """The build is entered before its manifest is put: a run killed right after the put is still
    proven to be this tool's, and the finish confirms it; the number counts only once confirmed."""
    from triton_release.registry.ledger import check_built_here

    repo, registry = ledgered
    second = edit(repo, "a", 1, "# one\n")
    built = registry.image("1.1.0")
    intend(registry, "1.1.0", second, built.config_digest)
    assert read_ledger(registry).newest == semver.Version(1, 0, 0)  # not issued yet
    registry.manifests["1.1.0"] = registry.manifests[built.digest] = built  # the put landed; then a kill
    registry.labels["1.1.0"] = {
        REVISION_LABEL: second,
        RELEASED_VERSIONS_LABEL: released_versions.label(dict(plan(repo, registry).record)),
    }
    check_built_here(registry, "1.1.0", built.digest, second)
    assert read_ledger(registry).releases["1.1.0"] == second
    assert read_ledger(registry).entries["1.1.0"].digest == built.digest


def test_an_entry_contradicting_another_is_refused(ledgered):
    """An entry tag saying a released version is another tree than an earlier entry says: one of
    them was written by someone else, and neither is trusted."""
    repo, registry = ledgered
    ledger = read_ledger(registry)
    forged = Ledger(ledger.entries, {**ledger.versions, "a": {1: "2" * 40}})  # covering no other entry
    write_entry(
        registry,
        "triton-release.ledger.1.0.1.entered-" + "0" * 12,
        forged.intending("1.0.1", "c", "sha256:" + "0" * 64),
    )
    edit(repo, "a", 1, "# one\n")
    with pytest.raises(Refused, match="cannot be read") as refused:
        plan(repo, registry)
    assert "a version 1 is git tree" in str(refused.value)


# -- the proof itself: the newest commit's trees, then only the models left, by their history --


def _trees(repo, ref: str = "HEAD") -> dict:
    return released_versions.trees_at(Git(repo.root), ref, "model_repository")


def test_a_tree_held_only_earlier_is_proven_by_its_own_models_history(git_repo, monkeypatch):
    git_repo.write({**python_model_files("a"), **python_model_files("b"), "b/1/model.py": PYTHON_MODEL + "# b\n"})
    first = git_repo.commit("a and b")
    old = _trees(git_repo)["a"][1]
    git_repo.write({"a/1/model.py": PYTHON_MODEL + "# edited\n"})
    head = git_repo.commit("a edited")
    asked: list[list[str] | None] = []
    held = released_versions.held_trees
    monkeypatch.setattr(released_versions, "held_trees", lambda *a: asked.append(a[3]) or held(*a))
    record = {"a": {1: old}, "b": _trees(git_repo)["b"]}
    released_versions.prove(Git(git_repo.root), record, [first, head], "model_repository", "The record")
    assert asked == [["a"]]  # b is proven by head's own trees; a's history alone is read
    with pytest.raises(Refused, match="git never held"):
        released_versions.prove(Git(git_repo.root), {"b": {1: old}}, [head], "model_repository", "The record")


def test_a_tree_held_only_on_a_merged_branch_is_proven(git_repo):
    """A release made from a side branch, whose edit of a the merge then dropped: its tree is in the
    history of the release's commit only on that branch, and is proven there."""
    git_repo.write({**python_model_files("a"), **python_model_files("b"), "b/1/model.py": PYTHON_MODEL + "# b\n"})
    git_repo.commit("a and b")
    git_repo.git("checkout", "-q", "-b", "side")
    git_repo.write({"a/1/model.py": PYTHON_MODEL + "# side\n"})
    git_repo.commit("a on the side")
    side = _trees(git_repo)["a"][1]
    git_repo.git("checkout", "-q", "main")
    git_repo.write({"b/1/model.py": PYTHON_MODEL + "# main\n"})
    git_repo.commit("b on main")
    git_repo.git("merge", "-q", "-s", "ours", "--no-edit", "side")
    head = git_repo.git("rev-parse", "HEAD")
    assert _trees(git_repo)["a"][1] != side
    released_versions.prove(Git(git_repo.root), {"a": {1: side}}, [head], "model_repository", "The record")


def test_more_models_than_the_narrow_proof_reads_are_proven_from_the_whole_history(git_repo, monkeypatch):
    monkeypatch.setattr(released_versions, "NARROW_MODELS", 1)
    git_repo.write({**python_model_files("a"), **python_model_files("b"), "b/1/model.py": PYTHON_MODEL + "# b\n"})
    git_repo.commit("a and b")
    old = _trees(git_repo)
    git_repo.write({"a/1/model.py": PYTHON_MODEL + "# 2\n", "b/1/model.py": PYTHON_MODEL + "# b 2\n"})
    head = git_repo.commit("both edited")
    record = {"a": old["a"], "b": old["b"]}
    released_versions.prove(Git(git_repo.root), record, [head], "model_repository", "The record")
    with pytest.raises(Refused, match="git never held"):
        released_versions.prove(
            Git(git_repo.root), {"a": old["b"], "b": old["a"]}, [head], "model_repository", "The record"
        )


@pytest.mark.parametrize("name", ["/etc", "a\0b", "../a", "x" * 300_000])
def test_a_record_naming_a_model_no_folder_can_be_is_refused_as_any_forged_record(git_repo, name):
    git_repo.write(python_model_files("a"))
    head = git_repo.commit("a")
    record = {"a": _trees(git_repo)["a"], name: {1: "1" * 40}}
    with pytest.raises(Refused, match="git never held"):
        released_versions.prove(Git(git_repo.root), record, [head], "model_repository", "The record")


# -- each version against its own folder: two versions swapped (#48 item 2) ------------------------


def forge_ledger(registry, versions: dict) -> None:
    """The ledger's entries deleted and one written in their place, whole, saying `versions`."""
    ledger = read_ledger(registry)
    tags = [t for t in registry.manifests if is_ledger_tag(t)]
    for tag in tags:
        del registry.manifests[tag]
    confirmed = next(t for t in tags if ".confirmed-" in t)
    write_entry(registry, confirmed, Ledger(ledger.entries, versions))


@pytest.fixture
def two_versions(git_repo):
    """Model a with versions 1 and 2 committed, each its own code, released as 1.0.0; and b."""
    git_repo.write({**python_model_files("a"), "a/2/model.py": PYTHON_MODEL + "# two\n", **python_model_files("b")})
    first = git_repo.commit("a/1, a/2 and b")
    return git_repo, first, _trees(git_repo)


def test_a_record_swapping_two_versions_of_a_model_is_refused(two_versions):
    """Each tree was held by some folder of a, so a proof by model accepted the swap, and the next
    release shipped a/1 with a/2's bytes. Each version is proven against its own folder."""
    repo, first, trees = two_versions
    registry = Registry()
    swapped = {"a": {1: trees["a"][2], 2: trees["a"][1]}, "b": trees["b"]}
    registry.release("1.0.0", first, swapped)
    edit(repo, "b", 1, "# b\n")
    with pytest.raises(Refused, match="git never held") as refused:
        plan(repo, registry)
    message = " ".join(str(refused.value).split())
    assert f"model_repository/a/1 as git tree {trees['a'][2][:12]}" in message
    assert "model_repository/b/1" not in message
    assert repo.git("status", "--porcelain") == ""


def test_a_ledger_swapping_two_versions_is_refused(two_versions):
    repo, first, trees = two_versions
    registry = Registry(ledger=True)
    registry.release("1.0.0", first, {"a": trees["a"], "b": trees["b"]})
    forge_ledger(registry, {"a": {1: trees["a"][2], 2: trees["a"][1]}, "b": trees["b"]})
    edit(repo, "b", 1, "# b\n")
    with pytest.raises(Refused, match="ledger") as refused:
        plan(repo, registry)
    assert "model_repository/a/1 as git tree" in " ".join(str(refused.value).split())


def test_a_ledger_naming_a_tree_only_todays_checkout_holds_is_refused(two_versions):
    """The ledger was proven against today's head too: an entry saying a/2 shipped as the edit made
    after the release passed, and the edit then looked released, shipped without a bump."""
    repo, first, trees = two_versions
    registry = Registry(ledger=True)
    registry.release("1.0.0", first, {"a": trees["a"], "b": trees["b"]})
    edit(repo, "a", 2, "# after the release\n")
    forge_ledger(registry, {"a": {1: trees["a"][1], 2: _trees(repo)["a"][2]}, "b": trees["b"]})
    with pytest.raises(Refused, match="git never held"):
        plan(repo, registry)


def test_a_bumped_version_is_proven_by_the_lower_folder_it_was_copied_from(two_versions):
    """A bump never committed: a/3 shipped as a/2's tree at the release's commit; a lower folder's
    tree is a bump's, and proven."""
    repo, first, trees = two_versions
    released_versions.prove(
        Git(repo.root), {"a": {**trees["a"], 3: trees["a"][2]}}, [first], "model_repository", "The record"
    )
