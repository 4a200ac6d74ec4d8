"""`release` end to end in a git repository: real build, real tritonserver, real registry."""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest

from support.git import GitRepo
from support.models import python_model_files
from support.reports import read_report
from support.stack import BASE_IMAGE, REGISTRY
from triton_release import contract
from triton_release.cli.main import main
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def first_release(tmp_path_factory, unique, docker_client):
    """A repository with two models, released once as 1.0.0 for the whole module."""
    root = tmp_path_factory.mktemp("release")
    git_repo = GitRepo(root / "work")
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    git_repo.commit("two models")
    target = f"{REGISTRY}/triton-release-test/release-{unique}"

    def release(*extra: str) -> tuple[int, dict]:
        report = root / "report.json"
        code = main(["release", "--to", target, "--base-image", BASE_IMAGE, "--report", str(report), *extra])
        return code, read_report(report)

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(git_repo.root)
        code, report = release()
    assert code == 0, report
    repo = RegistryRepository.parse(target)
    yield git_repo, repo, release, git_repo.git("rev-parse", "HEAD"), {t: repo.digest(t) for t in repo.tags()}
    docker_client.images.remove(f"{target}:candidate", force=True)


@pytest.fixture
def released(first_release, monkeypatch):
    """The module's release, the tree back at its commit. The tests that push a release of their
    own come last in the module: each test finds the registry as the first release left it."""
    git_repo, repo, release, commit, tags = first_release
    git_repo.git("reset", "-q", "--hard", commit)
    git_repo.git("clean", "-qfdx")
    assert {t: repo.digest(t) for t in repo.tags() if not contract.is_ledger_tag(t)} == {
        t: d for t, d in tags.items() if not contract.is_ledger_tag(t)
    }, "a test before this one released into the module's repository: put it last"
    monkeypatch.chdir(git_repo.root)
    return git_repo, repo, release


def test_first_release_is_1_0_0_with_every_step_timed(released):
    git_repo, repo, _ = released
    digest = repo.digest("1.0.0")
    config = repo.manifest("1.0.0").config_digest
    assert repo.tags() == [
        "1",
        "1.0",
        "1.0.0",
        "latest",
        f"sha-{git_repo.git('rev-parse', 'HEAD')[:12]}",
        contract.evidence_tag(digest),
        contract.ledger_entry_tag("1.0.0", "confirmed", digest),
        contract.ledger_entry_tag("1.0.0", "entered", config),
    ]  # and its evidence (docs/evidence.md), and the ledger's two entries of it (docs/tags.md)
    config = repo.image_config("1.0.0")["config"]
    assert config["Labels"]["org.opencontainers.image.revision"] == git_repo.git("rev-parse", "HEAD")
    assert config["Labels"]["org.opencontainers.image.version"] == "1.0.0"
    assert json.loads(config["Labels"]["triton-release.models"]) == {"a": [1], "b": [1]}


def test_a_golden_failure_pushes_nothing_and_leaves_the_tree_as_it_was(released):
    git_repo, repo, release = released
    tags = repo.tags()
    model_py = git_repo.models / "b" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 2"))
    git_repo.commit("b: a wrong answer")
    code, report = release()
    assert code == 1
    assert "golden cases failed" in report["error"]["message"] and "b/golden/basic.json" in report["error"]["message"]
    assert report["steps"]["test"]["ok"] is False and "push" not in report["steps"]
    assert report["steps"]["undo-bump"]["undone"] is True
    assert repo.tags() == tags
    assert git_repo.git("status", "--porcelain") == ""


def test_no_push_builds_and_tests_only(released, tmp_path):
    """With --junitxml, the test step's golden results as JUnit XML, as `test` writes them."""
    git_repo, repo, release = released
    tags = repo.tags()
    git_repo.write(
        {
            "a/config.pbtxt": (git_repo.models / "a" / "config.pbtxt").read_text()
            + 'parameters { key: "note" value { string_value: "x" } }\n'
        }
    )
    git_repo.commit("a: a config tweak")
    junit = tmp_path / "golden.xml"
    code, report = release("--no-push", "--junitxml", str(junit))
    assert code == 0 and report["released"] is False and report["version"] == "1.0.1"
    assert report["steps"]["test"]["passed"] is True
    assert repo.tags() == tags
    suite = ElementTree.parse(junit).getroot()
    cases = [case.get("name") for case in suite.iter("testcase")]
    assert any("a/basic" in (name or "") for name in cases), cases
    assert not list(suite.iter("failure")) and not list(suite.iter("error"))


def test_no_push_twice_with_an_edit_between_leaves_the_tree_as_it_was(released):
    """The README's local loop: try, edit, try again. A --no-push run releases nothing, so it undoes
    its bump: the next try is not refused over the folders the tool itself wrote."""
    git_repo, repo, release = released
    tags = repo.tags()
    model_py = git_repo.models / "a" / "1" / "model.py"
    for attempt in ("first", "second"):
        model_py.write_text(f"# the {attempt} try\n" + model_py.read_text())
        git_repo.commit(f"a: the {attempt} try")
        code, report = release("--no-push")
        assert code == 0, report.get("error")
        assert report["released"] is False and report["version"] == "1.1.0"
        assert [b["to"] for b in report["steps"]["bump"]["bumps"]] == [2]
        assert report["steps"]["undo-bump"]["undone"] is True
        assert git_repo.git("status", "--porcelain", "--ignored", "model_repository") == ""
    assert repo.tags() == tags


def test_a_one_model_change_is_bumped_committed_and_pushed_as_one_new_layer(released):
    git_repo, repo, release = released
    model_py = git_repo.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
    git_repo.commit("a: same answer, new code")
    code, report = release("--commit")
    assert code == 0, report.get("error")
    assert report["version"] == "1.1.0" and report["changed_models"] == ["a"]
    assert list(report["steps"]) == [
        "validate",
        "changed",
        "bump",
        "export",
        "environments",
        "build",
        "test",
        "push",
        "evidence",
        "tags",
        "commit",
        "tidy",
    ]
    assert all(step["seconds"] >= 0 for step in report["steps"].values())
    push = report["steps"]["push"]
    assert push["layers_uploaded"] + push["layers_mounted"] == 1  # a's version 2
    assert git_repo.git("log", "-1", "--format=%s") == "release 1.1.0"
    assert git_repo.git("tag", "--list", "v*") == "v1.1.0"
    assert git_repo.git("status", "--porcelain") == ""
    assert (git_repo.models / "a" / "2" / "model.py").exists()
    assert report["steps"]["test"]["cases"][0]["case"] == "a/basic"
    # the next run finds nothing new
    code, report = release()
    assert code == 0 and report["released"] is False and "build" not in report["steps"]


def test_an_auto_complete_models_served_signature_is_kept_and_compared(git_repo, releaser, docker_client):
    """No config.pbtxt: the signature is the one the server completed, kept in the image's label;
    batching switched off in auto_complete_config is then a major release."""
    from support.models import auto_complete_files

    git_repo.write(auto_complete_files("auto"))
    git_repo.commit("an auto-complete model")
    first = releaser()
    assert first["version"] == "1.0.0" and "signatures" in first["steps"]
    label = json.loads(releaser.registry.image_config("1.0.0")["config"]["Labels"]["triton-release.signatures"])
    assert label == {
        "auto": {"batched": True, "tensors": {"input INPUT0": ["FP32", [4]], "output OUTPUT0": ["FP32", [4]]}}
    }
    before = {layer["digest"] for layer in releaser.registry.manifest("1.0.0").layers}
    base_layers = len(docker_client.images.get(BASE_IMAGE).attrs["RootFS"]["Layers"])
    assert len(before) == base_layers + len(first["steps"]["build"]["layers"])  # labelled: no layer added
    # the tested build, relabeled into the released one, is removed once its server is gone
    assert first["steps"]["tidy"]["removed"] == [first["steps"]["build"]["image_id"]]
    assert docker_client.images.get(f"{releaser.target}:candidate").id != first["steps"]["build"]["image_id"]
    git_repo.write(auto_complete_files("auto", max_batch_size=0))
    git_repo.commit("auto: no batching")
    second = releaser()
    assert second["version"] == "2.0.0", second["steps"].get("signatures")
    assert "auto: max_batch_size changed between 0 and non-zero" in second["steps"]["signatures"]["release"]["reasons"]
