"""Change detection, version-folder bump and the release kind, on real git repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import semver

from support.models import PYTHON_MODEL, golden_case, python_config, python_model_files, write_tree
from support.reports import parse_report
from triton_release.cli.main import main
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history.bump import apply_bumps, plan_bumps, same_as_tree
from triton_release.history.changes import Changes
from triton_release.history.git import Git
from triton_release.history.releases import next_version, previous_release
from triton_release.history.releases import release_kind as _release_kind


def release_kind(found, bumps, signatures=None):
    return _release_kind(found, {b.model for b in bumps}, signatures)


ENSEMBLE = (
    'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'ensemble_scheduling { step [ { model_name: "a" model_version: -1 '
    'input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }\n'
)


@pytest.fixture
def released(git_repo):
    """Two python models and an ensemble over the first, committed as the base."""
    git_repo.write(
        {
            **python_model_files("a"),
            **python_model_files("b"),
            "a/1/weights.bin": bytes(range(256)),
            "ens/config.pbtxt": ENSEMBLE,
            "ens/1/.keep": "",
            "ens/golden/basic.json": golden_case(),
        }
    )
    git_repo.base = git_repo.commit("release")
    return git_repo


def detect(repo, base=None, head="HEAD"):
    return Changes(repo.models).between(base if base is not None else repo.base, head)


def test_edit_in_the_highest_version_bumps_it(released):
    released.write({"a/1/model.py": PYTHON_MODEL.replace("x + 1", "x + 2")})
    released.commit()
    found = detect(released)
    assert found.changed == ["a"] and found.ensembles == ("ens",) and found.to_test == ["a", "ens"]
    assert found.models["a"].reasons == ("files changed in version 1",)
    bumps = plan_bumps(found)
    assert [b.to_json() for b in bumps] == [{"model": "a", "from": 1, "to": 2}]
    apply_bumps(found, bumps, released.models)
    assert "x + 2" in (released.models / "a/2/model.py").read_text()
    assert "x + 1" in (released.models / "a/1/model.py").read_text()
    assert (released.models / "a/2/weights.bin").read_bytes() == bytes(range(256))
    assert (released.models / "a/1/weights.bin").read_bytes() == bytes(range(256))
    assert not list(released.models.glob("a/.triton-release-*"))
    assert release_kind(found, bumps).kind == "minor"


def test_binary_weights_are_bumped_byte_for_byte(released):
    released.write({"a/1/weights.bin": bytes(reversed(range(256))) * 10})
    released.commit()
    found = detect(released)
    apply_bumps(found, plan_bumps(found), released.models)
    assert (released.models / "a/2/weights.bin").read_bytes() == bytes(reversed(range(256))) * 10
    assert (released.models / "a/1/weights.bin").read_bytes() == bytes(range(256))


def test_a_clean_checkouts_version_folder_is_moved_to_the_new_version_not_written_again(released):
    released.write({"a/1/weights.bin": b"new weights" * 1000})
    released.commit()
    inode = (released.models / "a/1/weights.bin").stat().st_ino
    found = detect(released)
    apply_bumps(found, plan_bumps(found), released.models)
    assert (released.models / "a/2/weights.bin").stat().st_ino == inode  # moved: the same file
    assert (released.models / "a/2/weights.bin").read_bytes() == b"new weights" * 1000
    assert (released.models / "a/1/weights.bin").read_bytes() == bytes(range(256))
    assert not list(released.models.glob("a/.triton-release-*"))


def checked_out_as_crlf(repo):
    """A text file git checks out with CRLF line endings: the checkout's bytes are not its blob's."""
    repo.write({"a/1/notes.txt": "one\ntwo\n"})
    (repo.models / ".gitattributes").write_text("*.txt text eol=crlf\n")
    repo.commit("notes")
    (repo.models / "a/1/notes.txt").unlink()
    repo.git("checkout", "--", "model_repository/a/1/notes.txt")
    assert (repo.models / "a/1/notes.txt").read_bytes() == b"one\r\ntwo\r\n"


def skipped_in_the_worktree(repo):
    """A file git is told not to look at, changed: git status says nothing."""
    repo.git("update-index", "--skip-worktree", "model_repository/a/1/model.py")
    (repo.models / "a/1/model.py").write_text("# changed under git's nose\n")


@pytest.mark.parametrize(
    "setup",
    [
        checked_out_as_crlf,
        skipped_in_the_worktree,
        lambda repo: (repo.models / "a/1/empty").mkdir(),  # an empty folder git would not write
        lambda repo: (repo.models / "a/1/weights.bin").chmod(0o755),  # git writes it 0644
        lambda repo: os.mkfifo(repo.models / "a/1/pipe"),  # neither a file nor a folder: never read
    ],
    ids=["converted-on-checkout", "skip-worktree", "empty-folder", "executable-bit", "fifo"],
)
def test_a_version_folder_git_would_write_otherwise_is_written_from_git(released, setup):
    released.write({"a/1/weights.bin": b"new weights" * 1000})
    released.commit()
    setup(released)
    inode = (released.models / "a/1/weights.bin").stat().st_ino
    found = detect(released)
    apply_bumps(found, plan_bumps(found), released.models)
    assert (released.models / "a/2/weights.bin").stat().st_ino != inode
    assert (released.models / "a/2/weights.bin").read_bytes() == b"new weights" * 1000
    assert (released.models / "a/2/model.py").read_text() == PYTHON_MODEL
    assert not (released.models / "a/2/empty").exists() and not (released.models / "a/2/pipe").exists()
    if (released.models / "a/2/notes.txt").exists():
        assert (released.models / "a/2/notes.txt").read_bytes() == b"one\ntwo\n"  # git's bytes


def test_a_git_lfs_pointer_in_the_version_folder_is_written_from_git(released):
    pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 12\n"
    released.write({"a/1/weights.bin": b"new weights" * 1000, "a/1/big.bin": pointer})
    released.commit()
    inode = (released.models / "a/1/weights.bin").stat().st_ino
    found = detect(released)
    apply_bumps(found, plan_bumps(found), released.models)
    assert (released.models / "a/2/weights.bin").stat().st_ino != inode
    assert (released.models / "a/2/big.bin").read_text() == pointer


def test_a_folder_holding_its_trees_blobs_is_known_as_that_tree_without_writing_it_out(released, monkeypatch):
    git = Git(released.root)
    tree = git.text("rev-parse", "HEAD:model_repository/a/1")
    folder = released.models / "a/1"

    def written_out(*args, **kwargs):
        raise AssertionError("the tree was written out")

    monkeypatch.setattr("triton_release.history.bump.extract_tree", written_out)
    assert same_as_tree(git, tree, folder)
    monkeypatch.undo()
    (folder / "weights.bin").write_bytes(bytes(range(256))[::-1])  # same size, other bytes
    assert not same_as_tree(git, tree, folder)
    (folder / "weights.bin").write_bytes(bytes(range(256)))
    (folder / "extra.txt").write_text("not in git\n")
    assert not same_as_tree(git, tree, folder)
    (folder / "extra.txt").unlink()
    assert same_as_tree(git, tree, folder)


def test_renamed_file_in_the_highest_version(released):
    released.git("mv", "model_repository/a/1/weights.bin", "model_repository/a/1/weights-v2.bin")
    released.commit()
    found = detect(released)
    assert found.models["a"].edited_versions == (1,)
    apply_bumps(found, plan_bumps(found), released.models)
    assert sorted(p.name for p in (released.models / "a/2").iterdir()) == ["model.py", "weights-v2.bin"]
    assert sorted(p.name for p in (released.models / "a/1").iterdir()) == ["model.py", "weights.bin"]


def test_edit_in_an_older_version_is_refused_and_nothing_written(released):
    released.write({"a/2/model.py": PYTHON_MODEL})
    released.commit("add 2")
    released.base = released.git("rev-parse", "HEAD")
    released.write({"a/1/model.py": "# edited\n" + PYTHON_MODEL})
    released.commit()
    before = sorted(p.as_posix() for p in released.models.rglob("*"))
    with pytest.raises(Refused) as err:
        plan_bumps(detect(released))
    assert "model_repository/a/1/model.py: version 1 of a is a released version" in str(err.value)
    assert "put the change in version 2 (it becomes 3)" in str(err.value)
    assert sorted(p.as_posix() for p in released.models.rglob("*")) == before


def test_cli_refusal_exits_1(released, monkeypatch, capsys):
    released.write({"a/2/model.py": PYTHON_MODEL})
    released.commit("add 2")
    base = released.git("rev-parse", "HEAD")
    released.write({"a/1/model.py": "# edited\n"})
    released.commit()
    monkeypatch.chdir(released.root)
    assert main(["bump", "--base", base]) == 1
    assert "model_repository/a/1/model.py" in capsys.readouterr().err
    assert not (released.models / "a/3").exists()


def test_a_change_that_adds_the_next_version_is_kept(released):
    released.write({"a/2/model.py": PYTHON_MODEL.replace("x + 1", "x + 3")})
    released.commit()
    found = detect(released)
    assert found.models["a"].added_versions == (2,) and plan_bumps(found) == []
    kind = release_kind(found, [])
    assert kind.kind == "minor" and "a: new version folder" in kind.reasons


def test_editing_n_while_adding_n_plus_1_is_refused(released):
    released.write({"a/2/model.py": PYTHON_MODEL, "a/1/model.py": "# edited\n" + PYTHON_MODEL})
    released.commit()
    with pytest.raises(Refused, match="you already add version 2: put the change there"):
        plan_bumps(detect(released))


@pytest.mark.parametrize(
    ("file", "reason"), [("config.pbtxt", "config.pbtxt only"), ("requirements.txt", "requirements.txt only")]
)
def test_config_or_requirements_only_bumps_nothing(released, file, reason):
    content = (
        python_config("a") + "instance_group [ { kind: KIND_CPU count: 2 } ]\n"
        if file == "config.pbtxt"
        else "six==1.16.0\n"
    )
    released.write({f"a/{file}": content})
    released.commit()
    found = detect(released)
    assert reason in found.models["a"].reasons[0] and plan_bumps(found) == []
    assert release_kind(found, []).kind == "patch"


def test_golden_only_retests_and_bumps_nothing(released):
    released.write({"b/golden/more.json": golden_case()})
    released.commit()
    found = detect(released)
    assert found.changed == ["b"] and found.models["b"].golden_only and plan_bumps(found) == []
    assert release_kind(found, []).kind is None


def test_added_model(released):
    released.write(python_model_files("c"))
    released.commit()
    found = detect(released)
    assert found.added == ["c"] and plan_bumps(found) == []
    assert release_kind(found, []).reasons == ("c: model added",)


def test_removed_model(released):
    released.remove("b")
    released.commit()
    found = detect(released)
    assert found.removed == ["b"] and found.changed == []
    kind = release_kind(found, [])
    assert (kind.kind, kind.reasons) == ("major", ("b: model removed",))


def test_first_release_without_base(released):
    for base in ("", "0" * 40):
        found = Changes(released.models).between(base or None)
        assert found.base is None and found.changed == ["a", "b", "ens"] and plan_bumps(found) == []
    assert next_version(None, release_kind(found, []).kind) == semver.Version(1, 0, 0)


def test_shallow_clone_without_the_base_says_to_fetch_deeper(released, tmp_path):
    released.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    released.commit()
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{released.root}", str(clone)], check=True)
    with pytest.raises(UsageError, match="fetch-depth: 0"):
        Changes(clone / "model_repository").between(released.base)


def test_unknown_ref_and_non_ancestor_are_usage_errors(released, monkeypatch, capsys):
    with pytest.raises(UsageError, match="base 'nope' is not a commit"):
        detect(released, base="nope")
    released.git("checkout", "-q", "-b", "side", "HEAD")
    released.write({"b/1/model.py": "# side\n"})
    side = released.commit()
    released.git("checkout", "-q", "main")
    released.write({"a/1/model.py": "# main\n"})
    released.commit()
    with pytest.raises(UsageError, match="is not an ancestor of head"):
        detect(released, base=side)
    monkeypatch.chdir(released.root)
    assert main(["changed", "--base", "no-such-branch"]) == 2
    assert "no-such-branch" in capsys.readouterr().err


def test_refs_that_could_be_options_are_refused(released):
    with pytest.raises(UsageError, match="not a git reference"):
        detect(released, base="--output=/tmp/x")


def test_ref_forms(released):
    released.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    released.commit()
    released.git("tag", "v1.0.0", released.base)
    for base in (released.base, "HEAD~1", "v1.0.0", released.base[:10]):
        assert detect(released, base=base).changed == ["a"]


def test_changed_json(released, monkeypatch, capsys):
    released.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    released.commit()
    monkeypatch.chdir(released.root)
    assert main(["changed", "--base", released.base, "--json"]) == 0
    report = parse_report(capsys.readouterr().out)
    changed = report["steps"]["changed"]
    assert report["changed_models"] == ["a"]
    assert changed["changes"]["changed"] == ["a"] and changed["changes"]["ensembles"] == ["ens"]
    assert changed["bumps"] == [{"model": "a", "from": 1, "to": 2}] and changed["release"]["kind"] == "minor"


def test_bump_is_all_or_nothing(released, monkeypatch):
    released.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL, "b/1/model.py": "# 2\n" + PYTHON_MODEL})
    released.commit()
    found = detect(released)
    bumps = plan_bumps(found)
    real_cat_file = Git.cat_file
    calls = []

    def failing_cat_file(self, oids, *where):
        calls.append(1)
        if len(calls) == 2:  # b/1 restored (a/2 and b/2 are their checkout's version 1, moved)
            raise OSError(28, "No space left on device")
        return real_cat_file(self, oids, *where)

    monkeypatch.setattr(Git, "cat_file", failing_cat_file)
    before = {p.as_posix(): p.read_bytes() for p in released.models.rglob("*") if p.is_file()}
    with pytest.raises(InfrastructureError, match="No space left.*nothing was changed"):
        apply_bumps(found, bumps, released.models)
    after = {p.as_posix(): p.read_bytes() for p in released.models.rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("at", ["head", "1", "2"])
def test_a_bump_stopped_at_any_rename_puts_every_folder_back(released, monkeypatch, at, when):
    """A signal just before or just after each rename (N aside, N restored, the checkout's N moved
    to N+1): the working tree is as it was."""
    released.write({"a/1/weights.bin": b"new weights" * 1000})
    released.commit()
    found = detect(released)
    real_rename, stopped = os.rename, []

    def rename(src, dst):
        if Path(dst).name == at and not stopped:
            stopped.append(dst)
            if when == "after":
                real_rename(src, dst)
            raise KeyboardInterrupt
        real_rename(src, dst)

    before = {p.as_posix(): p.read_bytes() for p in released.models.rglob("*") if p.is_file()}
    monkeypatch.setattr("triton_release.history.bump.os.rename", rename)
    with pytest.raises(KeyboardInterrupt):
        apply_bumps(found, plan_bumps(found), released.models)
    assert stopped
    assert {p.as_posix(): p.read_bytes() for p in released.models.rglob("*") if p.is_file()} == before
    assert not (released.models / "a/2").exists() and not list(released.models.glob("a/.triton-release-*"))


def test_bump_refuses_an_existing_target(released):
    released.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    released.commit()
    (released.models / "a/2").mkdir()
    found = detect(released)
    with pytest.raises(Refused, match="a/2 already exists in the working tree"):
        apply_bumps(found, plan_bumps(found), released.models)


# -- semver rules -------------------------------------------------------------------------


def config_change(released, new_config: str):
    released.write({"a/config.pbtxt": new_config})
    released.commit()
    found = detect(released)
    return release_kind(found, plan_bumps(found))


def test_input_removed_is_major(released):
    config = python_config("a").replace('input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n', "")
    kind = config_change(released, config)
    assert kind.kind == "major" and "a: input INPUT0 removed or renamed" in kind.reasons


def test_input_renamed_is_major(released):
    kind = config_change(released, python_config("a").replace('"INPUT0"', '"X"'))
    assert kind.kind == "major" and "a: input X added" in kind.reasons


def test_dtype_or_dims_changed_is_major(released):
    kind = config_change(released, python_config("a", dims="[ 8 ]"))
    assert kind.kind == "major" and "a: input INPUT0 changed from FP32 [4] to FP32 [8]" in kind.reasons
    kind = config_change(released, python_config("a", dims="[ 8 ]", dtype="TYPE_FP16"))
    assert "a: output OUTPUT0 changed from FP32 [4] to FP16 [8]" in kind.reasons


def test_batching_switched_off_is_major(released):
    kind = config_change(released, python_config("a", max_batch_size=0))
    assert kind.kind == "major" and "a: max_batch_size changed between 0 and non-zero" in kind.reasons


def test_output_added_is_minor(released):
    config = python_config("a") + 'output [ { name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    kind = config_change(released, config)
    assert kind.kind == "minor" and kind.reasons == ("a: output EXTRA added",)


def test_config_tweak_is_patch(released):
    kind = config_change(released, python_config("a", max_batch_size=16))
    assert kind.kind == "patch" and kind.reasons == ("a: config.pbtxt only: no version folder bumped",)


def test_model_without_config_counts_as_minor_with_the_reason(git_repo):
    git_repo.write({"auto/1/model.py": PYTHON_MODEL})
    base = git_repo.commit()
    git_repo.write({"auto/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit()
    found = Changes(git_repo.models).between(base)
    kind = release_kind(found, plan_bumps(found))
    assert kind.kind == "minor" and "auto: signature unknown (no config.pbtxt); counted as minor" in kind.reasons
    seen = {"tensors": {"input INPUT0": ("FP32", (4,))}, "batched": True}
    kind = release_kind(found, plan_bumps(found), {("base", "auto"): seen, ("head", "auto"): seen})
    assert kind.reasons == ("auto: new version folder",)


def test_previous_release_order(released):
    assert previous_release(["latest", "1.2.0", "1.10.0", "sha-abc", "1.9"]) == (semver.Version(1, 10, 0), "registry")
    git = Git(released.root)
    assert previous_release([], git) == (None, "none")
    released.git("tag", "v0.9.0")
    released.git("tag", "v0.10.1")
    assert previous_release(["latest"], git) == (semver.Version(0, 10, 1), "git tag")
    assert next_version(semver.Version(1, 2, 3), "major") == semver.Version(2, 0, 0)
    assert next_version(semver.Version(1, 2, 3), "minor") == semver.Version(1, 3, 0)
    assert next_version(semver.Version(1, 2, 3), "patch") == semver.Version(1, 2, 4)
    assert next_version(semver.Version(1, 2, 3), None) is None


def test_files_at_the_top_of_the_model_repository_are_no_models(git_repo):
    git_repo.write({**python_model_files("a"), "README.md": "# our models\n", ".gitkeep": ""})
    git_repo.commit("models and a readme")
    found = Changes(git_repo.models).between(None, "HEAD")
    assert sorted(found.models) == ["a"]


def test_bump_works_when_the_model_repository_is_the_top_of_the_git_repository(tmp_path):
    root = write_tree(tmp_path / "models", python_model_files("a"))
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "a"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True)
    base = Git(root).text("rev-parse", "HEAD")
    (root / "a" / "1" / "model.py").write_text(PYTHON_MODEL.replace("x + 1", "x + 2"))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", "a v2"], cwd=root, check=True)
    found = Changes(root).between(base, "HEAD")
    bumps = plan_bumps(found)
    apply_bumps(found, bumps, root)
    assert "x + 2" in (root / "a" / "2" / "model.py").read_text()
    assert "x + 1" in (root / "a" / "1" / "model.py").read_text()


def test_an_auto_complete_models_served_signature_makes_the_kind_and_survives_its_label(git_repo):
    from triton_release.history.releases import served_signature, signatures_from_label, signatures_label

    served = {
        "name": "auto",
        "max_batch_size": 4,
        "backend": "python",
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["4"]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        "unknown_future_field": 1,
    }
    before = served_signature(served)
    assert before == {"tensors": {"input INPUT0": ("FP32", (4,)), "output OUTPUT0": ("FP32", (4,))}, "batched": True}
    assert signatures_from_label(signatures_label({"auto": before})) == {"auto": before}
    assert signatures_from_label("not json") == {} and served_signature({"input": 3}) is None
    git_repo.write({"auto/1/model.py": PYTHON_MODEL})
    base = git_repo.commit()
    git_repo.write({"auto/1/model.py": "# 2\n" + PYTHON_MODEL})
    git_repo.commit()
    found = Changes(git_repo.models).between(base)
    after = served_signature({**served, "max_batch_size": 0})
    kind = release_kind(found, plan_bumps(found), {("base", "auto"): before, ("head", "auto"): after})
    assert kind.kind == "major" and "auto: max_batch_size changed between 0 and non-zero" in kind.reasons
