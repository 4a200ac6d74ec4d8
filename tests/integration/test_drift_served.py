"""Drift on the real stack: a model's new version answers its golden inputs beside the version
before it, in the server that tested it; the difference is reported, and refuses the release
only above --max-drift (the action's input max-drift)."""

from __future__ import annotations

import contextlib
import json

import docker
import pytest

from support.models import (
    ACCUMULATOR_MODEL,
    PYTHON_MODEL,
    PYTHON_MODEL_RAISING,
    golden_case,
    python_model_files,
    sequence_case,
    sequence_config,
    write_tree,
)
from support.stack import BASE_IMAGE
from support.wheels import make_wheel, offline_index
from triton_release import steps
from triton_release.models.repository import Repository
from triton_release.registry.candidate.shard_results import read_shard_result
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration

SCALED = [round(v * 1.01, 4) for v in (2, 3, 4, 5)]  # (x + 1) * 1.01 for the golden inputs 1, 2, 3, 4


def test_a_new_version_scaling_its_output_by_1_01_drifts_1_percent_and_max_drift_refuses_it(git_repo, releaser):
    git_repo.write(python_model_files("a"))
    git_repo.commit("a model")
    first = releaser()
    assert first["version"] == "1.0.0" and first["steps"]["test"]["drift"] == []  # a first release: nothing before
    tags = releaser.registry.tags()

    model_py = git_repo.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("(x + 1)", "((x + 1) * 1.01)"))
    git_repo.write({"a/golden/basic.json": golden_case(out=SCALED)})
    git_repo.commit("a: scaled by 1.01")

    refused = releaser("--max-drift", "0.001", code=1)
    assert "drifted beyond max_drift 0.001" in refused["error"]["message"], refused["error"]
    assert refused["steps"]["test"]["passed"] is True and refused["steps"]["test"]["ok"] is False
    assert "push" not in refused["steps"] and refused["steps"]["undo-bump"]["undone"] is True
    assert releaser.registry.tags() == tags
    assert git_repo.git("status", "--porcelain") == ""
    [drift] = refused["steps"]["test"]["drift"]
    assert (drift["model"], drift["from_version"], drift["to_version"]) == ("a", 1, 2)
    assert 0.0099 < drift["max_rel_diff"] < 0.0101

    # the same change through the action, without a bound: released, the drift reported
    released, text = releaser.action(git_repo.root)
    assert released["version"] == "1.1.0" and "push" in released["steps"]
    [drift] = released["steps"]["test"]["drift"]
    [output] = drift["outputs"]
    assert output["name"] == "OUTPUT0" and 0.0099 < output["max_rel_diff"] < 0.0101
    assert 0.0499 < output["max_abs_diff"] < 0.0501  # 5 -> 5.05
    assert output["cases_beyond_tolerance"] == 1 and drift["beyond_tolerance"] is True
    assert "**Drift**" in text
    assert "| `a` | 1 -> 2 | `OUTPUT0` | 0.05 | **1.00%** | **yes**: 1 of 1 cases" in text, text


def test_both_versions_load_with_the_cpu_groups_and_the_environment_and_sequence_steps_are_compared(
    tmp_path, docker_client, image_tags, monkeypatch
):
    """A KIND_GPU model with its own environment, loaded on this CPU-only machine with both versions
    (the override composes with the CPU one and EXECUTION_ENV_PATH); a sequence model whose steps
    are compared, the step expecting an error skipped; a new model noted."""
    scaled = PYTHON_MODEL.replace("(x + 1)", "((x + 1) * 1.01)")
    files = {**python_model_files("envgpu"), **python_model_files("new")}
    files["envgpu/config.pbtxt"] += "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n"
    files["envgpu/1/model.py"] = "import shared\n\n" + PYTHON_MODEL
    files["envgpu/2/model.py"] = "import shared\n\n" + scaled
    files["envgpu/requirements.txt"] = "shared==1.0\n"
    files["envgpu/golden/basic.json"] = golden_case(out=SCALED)
    files.update(
        {
            "seq/config.pbtxt": sequence_config("seq"),
            "seq/1/model.py": ACCUMULATOR_MODEL,
            "seq/2/model.py": ACCUMULATOR_MODEL,
            "seq/golden/case.json": sequence_case((1, 1), (-1, "negative"), (2, 3)),
        }
    )
    repo = Repository.load(write_tree(tmp_path / "model_repository", files))
    index = tmp_path / "index"
    index.mkdir()
    make_wheel(index, "shared", "1.0")
    offline_index(monkeypatch, index)
    tag = f"triton-release-test/drift:{tmp_path.name[-12:].lower().strip('_')}"
    image_tags.append(tag)
    steps.build(repo, BASE_IMAGE, tag)

    run = steps.test(
        repo,
        tag,
        ["envgpu", "new", "seq"],
        server_options=ServerOptions(load_timeout=60),
        new_versions=("envgpu", "new", "seq"),
    )
    assert run.passed and run.on_cpu == ("envgpu",)
    drift = {d.model: d for d in run.drift}
    assert (drift["envgpu"].previous, drift["envgpu"].version) == (1, 2)
    assert drift["envgpu"].max_rel_diff == pytest.approx(0.01, rel=1e-3) and drift["envgpu"].beyond_tolerance
    assert drift["seq"].compared and drift["seq"].max_rel_diff == 0.0 and drift["seq"].outputs[0].cases == 1
    assert drift["seq"].skipped == ("seq/case step 2: expects an error",)
    assert "a new model" in drift["new"].note and not drift["new"].compared


def test_a_staged_candidates_shard_measures_drift_and_max_drift_fails_its_record_and_the_promote(
    git_repo, releaser, docker_client, cli_report
):
    git_repo.write(python_model_files("a"))
    git_repo.commit("a model")
    releaser()  # 1.0.0: the version the candidate's new one is compared with
    latest = releaser.registry.digest("latest")
    model_py = git_repo.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("(x + 1)", "((x + 1) * 1.01)"))
    git_repo.write({"a/golden/basic.json": golden_case(out=SCALED)})
    git_repo.commit("a: scaled by 1.01")

    run = cli_report

    staged = run("stage", "--to", releaser.target, "--base-image", BASE_IMAGE)
    candidate = staged["candidate"]
    labels = releaser.registry.image_config(candidate.split("@", 1)[1])["config"]["Labels"]
    assert json.loads(labels["triton-release.new-versions"]) == ["a"]
    try:
        tested = run("test", "--image", candidate, "--shard", "shard-1")  # no bound: reported, passed
        [drift] = tested["steps"]["test"]["drift"]
        assert (drift["model"], drift["from_version"], drift["to_version"]) == ("a", 1, 2)
        assert 0.0099 < drift["max_rel_diff"] < 0.0101

        refused = run("test", "--image", candidate, "--shard", "shard-1", "--max-drift", "0.001", code=1)
        assert "drifted beyond max_drift 0.001" in refused["error"]["message"]
        record = read_shard_result(releaser.registry, candidate.split("@", 1)[1], "shard-1")
        assert not record.passed and record.failed_cases == [] and "drifted beyond max_drift" in record.reason

        promoted = run("promote", "--candidate", candidate, "--version", staged["version"], code=1)
        assert "shard-1 failed: Model a drifted beyond max_drift 0.001" in promoted["error"]["message"]
        assert "1.1.0" not in releaser.registry.tags() and releaser.registry.digest("latest") == latest
    finally:  # the candidate as pulled by digest; the releaser removes its local tag
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(candidate, force=True)


def test_a_previous_version_that_fails_beside_the_new_one_leaves_the_new_one_tested_alone_and_drift_not_measured(
    tmp_path, image_tags
):
    """Paired from its first load, a model whose version 1 cannot start is loaded again as the image
    holds it: its golden cases test version 2 and pass; its drift is noted as not measured."""
    files = python_model_files("a")
    files["a/2/model.py"] = files["a/1/model.py"]
    files["a/1/model.py"] = PYTHON_MODEL_RAISING
    repo = Repository.load(write_tree(tmp_path / "model_repository", files))
    tag = f"triton-release-test/drift-apart:{tmp_path.name[-12:].lower().strip('_')}"
    image_tags.append(tag)
    steps.build(repo, BASE_IMAGE, tag)

    run = steps.test(repo, tag, ["a"], server_options=ServerOptions(load_timeout=60), new_versions=("a",))
    assert run.passed and [c.passed for c in run.cases] == [True]
    [drift] = run.drift
    assert drift.unmeasured and not drift.compared
    assert drift.note.startswith("version 1 did not load beside 2: "), drift.note
    assert "weights file is missing" in drift.note
