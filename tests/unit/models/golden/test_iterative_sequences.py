"""Models with `sequence_batching { iterative_sequence: true }` take plain cases, as NVIDIA's own
tests send them plain requests (server r24.10, qa/L0_backend_python/request_rescheduling): validate
accepts them, and refuses a sequence case for such a model, saying why. Served:
tests/integration/test_iterative_sequences_served.py."""

from __future__ import annotations

import json

from support.models import int_tensor, iterative_config, sequence_case, sequence_config, write_tree
from triton_release.models import golden
from triton_release.models.repository import load_model
from triton_release.models.validate import validate

PLAIN = json.dumps({"inputs": [int_tensor("INPUT0", [3])], "outputs": [int_tensor("OUTPUT0", [5])]}, indent=2)
STREAMED = json.dumps(
    {"inputs": [int_tensor("INPUT0", [2])], "outputs": [[int_tensor("OUTPUT0", [1])], [int_tensor("OUTPUT0", [0])]]},
    indent=2,
)
MODEL_PY = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"


def model_with(tmp_path, config: str, case: str):
    root = write_tree(
        tmp_path / "model_repository",
        {"it/config.pbtxt": config, "it/1/model.py": MODEL_PY, "it/golden/case.json": case},
    )
    model = load_model(root / "it", root)
    found, problems = golden.load_case(model.golden_cases[0], "it")
    assert not problems, [str(p) for p in problems]
    return root, found, model


def test_a_plain_case_fits_an_iterative_sequence_model(tmp_path):
    root, case, model = model_with(tmp_path, iterative_config("it"), PLAIN)
    assert golden.iterative_model(model) and not golden.sequence_model(model)
    assert golden.check_against_config(case, model) == []
    assert validate(root).problems == ()


def test_a_decoupled_iterative_model_takes_a_plain_case_of_several_responses(tmp_path):
    root, case, model = model_with(tmp_path, iterative_config("it", decoupled=True), STREAMED)
    assert golden.check_against_config(case, model) == [] and validate(root).problems == ()


def test_a_sequence_case_for_an_iterative_model_is_a_problem_saying_to_write_plain_cases(tmp_path):
    text = sequence_case((1, 1))
    root, case, model = model_with(tmp_path, iterative_config("it"), text)
    [problem] = golden.check_against_config(case, model)
    assert "it/config.pbtxt has sequence_batching with iterative_sequence: true" in problem.message
    assert "no correlation id, no START/END" in problem.message and "case of its own" in problem.message
    assert problem.path.name == "case.json" and problem.line == text.count("\n", 0, text.index('"sequence"')) + 1
    assert [p.message for p in validate(root).problems] == [problem.message]


def test_a_direct_sequence_model_still_needs_sequence_cases(tmp_path):
    root, case, model = model_with(tmp_path, sequence_config("it"), PLAIN)
    assert golden.sequence_model(model) and not golden.iterative_model(model)
    [problem] = golden.check_against_config(case, model)
    assert "it/config.pbtxt has sequence_batching: every request needs a correlation id" in problem.message
