"""A golden case's "outputs" against its model's transaction policy: a decoupled model answers
with a list of responses (`"outputs": []` meaning exactly none; only a missing "outputs" is not
compared), any other with one response, a list of tensors. validate says which shape the config
asks for; the comparison holds a decoupled case of no response to exactly none."""

from __future__ import annotations

import json

import numpy as np

from support.models import DECOUPLED_CONFIG, DECOUPLED_MODEL, case_file, python_model_files
from triton_release.cli import main
from triton_release.models.answers import Answer, Reply
from triton_release.models.inference import judge

COUNT = [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [1]}]
OUT = {"name": "OUT", "datatype": "INT32", "shape": [1], "data": [0]}


def validated(make_repo, tmp_path, capsys, files: dict) -> tuple[int, str, dict]:
    root = make_repo({"counter/config.pbtxt": DECOUPLED_CONFIG, "counter/1/model.py": DECOUPLED_MODEL, **files})
    report = tmp_path / "report.json"
    code = main(["validate", "--model-repository", str(root), "--report", str(report)])
    out = capsys.readouterr()
    return code, out.out + out.err, json.loads(report.read_text())["steps"]["validate"]


def test_a_decoupled_models_case_with_one_list_of_tensors_is_refused_naming_the_shape(make_repo, tmp_path, capsys):
    code, printed, _ = validated(
        make_repo, tmp_path, capsys, {"counter/golden/one.json": json.dumps({"inputs": COUNT, "outputs": [OUT]})}
    )
    assert code == 1, printed
    assert "counter/golden/one.json:1" in printed
    assert "decoupled: true" in printed and "list of responses, each a list of tensors" in printed


def test_a_plain_models_case_with_a_list_of_responses_is_refused_naming_the_shape(make_repo, tmp_path, capsys):
    files = python_model_files("a")
    raw = json.loads(files["a/golden/basic.json"])
    raw["outputs"] = [raw["outputs"], raw["outputs"]]
    files["a/golden/basic.json"] = json.dumps(raw)
    code, printed, _ = validated(make_repo, tmp_path, capsys, files)
    assert code == 1, printed
    assert "a/golden/basic.json" in printed and "is not decoupled" in printed
    assert "exactly one response" in printed


def test_a_decoupled_case_of_no_response_is_no_warning_of_no_outputs(make_repo, tmp_path, capsys):
    code, printed, found = validated(
        make_repo,
        tmp_path,
        capsys,
        {
            "counter/golden/none.json": json.dumps({"inputs": COUNT, "outputs": []}),
            "counter/golden/unchecked.json": json.dumps({"inputs": COUNT}),
        },
    )
    assert code == 0, printed
    warned = [w["path"] for w in found["warnings"] if 'no "outputs"' in w["message"]]
    assert [p.rsplit("/", 1)[-1] for p in warned] == ["unchecked.json"], found["warnings"]


def test_a_decoupled_case_of_no_response_fails_on_one_response(tmp_path):
    case = case_file(tmp_path, "counter", json.dumps({"inputs": COUNT, "outputs": []}))
    one = Reply((Answer({"OUT": (np.array([0], dtype=np.int32), "INT32", "")}),))
    outcome = judge(case, case.steps[0], one, decoupled=True)
    assert not outcome.passed and "expected no response" in outcome.message and "got 1" in outcome.message
    assert judge(case, case.steps[0], Reply(()), decoupled=True).passed
    # a model that is not decoupled: "outputs": [] lists no output, so nothing is compared
    assert judge(case, case.steps[0], one, decoupled=False).passed
    # a missing "outputs" is not compared, whatever came
    unchecked = case_file(tmp_path, "counter", json.dumps({"inputs": COUNT}))
    assert judge(unchecked, unchecked.steps[0], one, decoupled=True).passed
