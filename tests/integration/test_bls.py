"""A model calling another (BLS) in the real tritonserver: its callee is loaded with it."""

from __future__ import annotations

import pytest

from support.bls import aliased_caller_files, completing_caller_files, helped_caller_files
from support.models import bls_caller_files, python_model_files
from support.stack import built_image
from triton_release import steps
from triton_release.models.repository import Repository
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration


def test_a_caller_is_tested_with_its_callee_loaded(docker_client, make_repo, unique):
    repo = Repository.load(
        make_repo(
            {**bls_caller_files("caller", "callee"), **python_model_files("callee"), **python_model_files("alone")}
        )
    )
    with built_image(docker_client, repo, f"trt-bls/calls:{unique}") as tag:
        run = steps.test(repo, tag, ["caller"], server_options=ServerOptions(load_timeout=60))
    assert run.passed and [c.case for c in run.cases] == ["caller/basic"]
    assert set(run.loaded) == {"caller", "callee"}


def test_callers_through_a_helper_module_and_an_alias_are_tested_with_their_callee(docker_client, make_repo, unique):
    """The call made in helpers.py (a partial of an alias) and the one through `InferenceRequest as IR`
    both load the callee: without it loaded, tritonserver answers their cases with an error."""
    repo = Repository.load(
        make_repo(
            {
                **helped_caller_files("helped", "callee"),
                **aliased_caller_files("aliased", "callee"),
                **python_model_files("callee"),
            }
        )
    )
    with built_image(docker_client, repo, f"trt-bls/followed:{unique}") as tag:
        run = steps.test(repo, tag, ["aliased", "helped"], server_options=ServerOptions(load_timeout=60))
    assert run.passed, [c.to_json() for c in run.failed]
    assert sorted(c.case for c in run.cases) == ["aliased/basic", "helped/basic"]
    assert set(run.loaded) == {"aliased", "helped", "callee"}


def test_a_completing_caller_following_validates_advice_is_served_with_its_callee(
    docker_client, make_repo, unique, tmp_path, monkeypatch, capsys
):
    """validate advises declaring the model a caller computes at run time in its config.pbtxt; for a
    model without one (its auto_complete_config completes it), that advice as printed gives a
    config.pbtxt of one line: validate passes it, and the image serves the caller's case with its
    callee loaded, Triton completing the config."""
    import json
    import re

    from triton_release.cli import main

    root = make_repo({**completing_caller_files("caller", "callee"), **python_model_files("callee")})
    monkeypatch.chdir(root.parent)
    report = tmp_path / "report.json"
    assert main(["validate", "--report", str(report)]) == 0
    warnings = json.loads(report.read_text())["steps"]["validate"]["warnings"]
    [advice] = [w["message"] for w in warnings if "Declare the models it calls" in w["message"]]
    path, text = re.search(r"Declare the models it calls in (\S+): (parameters \{.*\})", advice).groups()
    (root.parent / path).write_text(text.replace("model_a,model_b", "callee") + "\n")
    assert main(["validate", "--report", str(report)]) == 0, capsys.readouterr().err
    repo = Repository.load(root)
    assert repo.needs()["caller"] == {"callee"}
    with built_image(docker_client, repo, f"trt-bls/completing:{unique}") as tag:
        run = steps.test(repo, tag, ["caller"], server_options=ServerOptions(load_timeout=60))
    assert run.passed, [c.to_json() for c in run.failed]
    assert [c.case for c in run.cases] == ["caller/basic"] and set(run.loaded) == {"caller", "callee"}
