"""Sequence cases and expected errors, without a server: the format, every problem with its step
and line, the checks against a model's config, the judging of an error, and what `record` writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.models import ACCUMULATOR_MODEL, golden_case, python_config, sequence_case, sequence_config, write_tree
from triton_release.models import answers, golden
from triton_release.models.inference import Answer, Reply, judge
from triton_release.models.repository import load_model
from triton_release.models.validate import validate


def load(tmp_path, text: str, model: str = "acc"):
    path = tmp_path / model / "golden" / "case.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return golden.load_case(path, model)


def loaded(tmp_path, text: str, model: str = "acc") -> golden.GoldenCase:
    case, problems = load(tmp_path, text, model)
    assert not problems, [str(p) for p in problems]
    return case


def line_with(text: str, needle: str, occurrence: int = 1) -> int:
    at = -1
    for _ in range(occurrence):
        at = text.index(needle, at + 1)
    return text.count("\n", 0, at) + 1


def accumulator(tmp_path, config: str | None = None, case: str | None = None):
    """A model folder `acc` with a sequence config and one case; (case, model)."""
    root = write_tree(
        tmp_path / "model_repository",
        {
            "acc/config.pbtxt": config if config is not None else sequence_config("acc"),
            "acc/1/model.py": ACCUMULATOR_MODEL,
            "acc/golden/case.json": case if case is not None else sequence_case((1, 1), (2, 3), (3, 6)),
        },
    )
    model = load_model(root / "acc", root)
    found, problems = golden.load_case(model.golden_cases[0], "acc")
    assert not problems, [str(p) for p in problems]
    return found, model


# -- the format -----------------------------------------------------------------------------------


def test_a_sequence_case_loads_its_steps_in_order(tmp_path):
    case = loaded(tmp_path, sequence_case((1, 1), (2, 3), (-1, "negative amount"), (3, 6), timeout=5))
    assert case.sequence is not None and len(case.steps) == 4
    assert [s.inputs[0].data for s in case.steps] == [(1,), (2,), (-1,), (3,)]
    assert case.steps[1].outputs[0].data == (3,) and case.steps[2].error == golden.ExpectedError("negative amount")
    assert case.timeout == 5 and not case.unrecorded
    assert [t.data for t in case.expected] == [(1,), (3,), (6,)]


def test_a_plain_case_is_one_step(tmp_path):
    case = loaded(tmp_path, golden_case())
    assert case.sequence is None and len(case.steps) == 1 and case.steps[0].inputs == case.inputs


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("negative input", golden.ExpectedError(text="negative input")),
        ({"regex": "negative input -\\d+"}, golden.ExpectedError(pattern="negative input -\\d+")),
        (True, golden.ExpectedError()),
    ],
)
def test_an_error_case_loads_its_expected_error(tmp_path, written, expected):
    raw = {"inputs": json.loads(golden_case())["inputs"], "error": written}
    case = loaded(tmp_path, json.dumps(raw))
    assert case.error == expected and case.outputs == () and case.unrecorded is (written is True)


def test_an_expected_error_matches_text_regex_or_anything():
    message = "Failed to process the request(s) for model 'm_0', message: TritonModelException: negative input -3"
    assert golden.ExpectedError(text="negative input -3").matches(message)
    assert not golden.ExpectedError(text="Negative").matches(message)
    assert golden.ExpectedError(pattern=r"negative input -\d+$").matches(message)
    assert not golden.ExpectedError(pattern=r"^negative").matches(message)
    assert golden.ExpectedError().matches("anything at all")


@pytest.mark.parametrize("written", [False, "", 3, {"regex": ""}, {"text": "x"}, ["x"]])
def test_an_error_that_is_neither_text_regex_nor_true_is_a_problem(tmp_path, written):
    text = json.dumps({"inputs": json.loads(golden_case())["inputs"], "error": written}, indent=2)
    case, problems = load(tmp_path, text)
    assert case is None and len(problems) == 1
    assert '"error" must be text the expected error message contains' in problems[0].message
    assert problems[0].line == line_with(text, '"error"')


def test_an_error_regex_that_does_not_compile_is_a_problem(tmp_path):
    case, problems = load(
        tmp_path, json.dumps({"inputs": json.loads(golden_case())["inputs"], "error": {"regex": "negative ("}})
    )
    assert case is None and "does not compile" in problems[0].message and "negative (" in problems[0].message


def test_outputs_and_an_error_together_are_a_problem(tmp_path):
    case, problems = load(tmp_path, json.dumps({**json.loads(golden_case()), "error": "negative"}))
    assert case is None and len(problems) == 1 and 'both "outputs" and "error"' in problems[0].message


@pytest.mark.parametrize("key", ["inputs", "outputs", "error"])
def test_a_request_key_beside_sequence_is_a_problem(tmp_path, key):
    raw = json.loads(sequence_case((1, 1)))
    raw[key] = "negative" if key == "error" else []
    case, problems = load(tmp_path, json.dumps(raw, indent=2))
    assert case is None and any(f'"{key}" beside "sequence"' in p.message for p in problems)


@pytest.mark.parametrize("sequence", [[], {}, "steps"])
def test_a_sequence_that_is_not_a_list_of_steps_is_a_problem(tmp_path, sequence):
    case, problems = load(tmp_path, json.dumps({"sequence": sequence}))
    assert case is None and '"sequence" must be a list of steps' in problems[0].message


def test_a_wrong_step_is_reported_with_its_index_and_line(tmp_path):
    raw = json.loads(sequence_case((1, 1), (2, 3), (3, 6)))
    raw["sequence"][2]["inputs"][0]["shape"] = [2]  # holds 2 elements, "data" has 1
    raw["sequence"][1]["colour"] = "red"
    text = json.dumps(raw, indent=2)
    case, problems = load(tmp_path, text)
    assert case is None and len(problems) == 2, [str(p) for p in problems]
    unknown, shape = problems
    assert unknown.message.startswith("sequence step 2: unknown key 'colour'")
    assert unknown.line == line_with(text, '"colour"')
    assert shape.message.startswith("sequence step 3: input 'INPUT0': shape [2] holds 2 elements")
    assert shape.line == line_with(text, '"INPUT0"', occurrence=3)  # the third step's, not the first's


def test_a_step_that_is_not_an_object_is_a_problem_on_its_line(tmp_path):
    text = '{"sequence": [\n  {"inputs": []},\n  42\n]}'
    case, problems = load(tmp_path, text)
    assert case is None and problems[0].message.startswith("sequence step 2: a step is an object")
    assert problems[0].line == 3


@pytest.mark.parametrize("parameter", ["sequence_id", "sequence_start", "sequence_end"])
def test_sequence_parameters_are_refused_with_the_sequence_form(tmp_path, parameter):
    text = json.dumps({**json.loads(golden_case()), "parameters": {parameter: 1}}, indent=2)
    case, problems = load(tmp_path, text)
    assert case is None and len(problems) == 1
    assert f"parameter {parameter!r} is Triton's sequence control" in problems[0].message
    assert '{"sequence": [' in problems[0].message and problems[0].line == line_with(text, f'"{parameter}"')


@pytest.mark.parametrize("parameter", ["priority", "headers", "triton_enable_empty_final_response"])
def test_other_reserved_parameters_are_refused(tmp_path, parameter):
    case, problems = load(tmp_path, json.dumps({**json.loads(golden_case()), "parameters": {parameter: 1}}))
    assert case is None and f"parameter {parameter!r} is reserved by Triton" in problems[0].message


def test_a_timeout_parameter_points_to_the_case_key(tmp_path):
    case, problems = load(tmp_path, json.dumps({**json.loads(golden_case()), "parameters": {"timeout": 5}}))
    assert case is None and 'its own "timeout" key' in problems[0].message


def test_other_parameters_still_load(tmp_path):
    assert loaded(tmp_path, json.dumps({**json.loads(golden_case()), "parameters": {"mode": "fast"}})).parameters


# -- against the model's config -------------------------------------------------------------------


def test_a_sequence_case_fits_a_sequence_model(tmp_path):
    case, model = accumulator(tmp_path)
    assert golden.check_against_config(case, model) == []


def test_a_plain_case_for_a_sequence_model_is_a_problem_naming_the_sequence_form(tmp_path):
    plain = json.dumps(
        {
            "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [1]}],
            "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [1], "data": [1]}],
        }
    )
    case, model = accumulator(tmp_path, case=plain)
    problems = golden.check_against_config(case, model)
    assert len(problems) == 1 and "acc/config.pbtxt has sequence_batching" in problems[0].message
    assert '{"sequence": [' in problems[0].message and problems[0].line == 1


@pytest.mark.parametrize("strategy", ["direct", "oldest"])
def test_both_sequence_strategies_count_as_sequence_models(tmp_path, strategy):
    case, model = accumulator(
        tmp_path, config=sequence_config("acc", strategy), case=sequence_case((1, 1), batched=strategy == "oldest")
    )
    assert golden.sequence_model(model) and golden.check_against_config(case, model) == []


def test_a_sequence_case_for_a_model_without_sequence_batching_is_a_problem(tmp_path):
    config = python_config("acc", max_batch_size=0, dims="[ 1 ]", dtype="TYPE_INT32")
    case, model = accumulator(tmp_path, config=config)
    problems = golden.check_against_config(case, model)
    assert len(problems) == 1 and "acc/config.pbtxt has no sequence_batching" in problems[0].message
    assert problems[0].line == 2  # "sequence": [ is the second line of the file


def test_a_wrong_shape_inside_a_step_names_the_step_and_its_line(tmp_path):
    text = sequence_case((1, 1), (2, 3), (3, 6), batched=True)  # [1, 1]: a direct model has no batch dimension
    case, model = accumulator(tmp_path, case=text)
    problems = golden.check_against_config(case, model)
    assert len(problems) == 6  # INPUT0 and OUTPUT0 of every step
    assert problems[2].message.startswith("sequence step 2: input 'INPUT0' has shape [1, 1], which does not fit")
    assert problems[2].line == line_with(text, '"INPUT0"', occurrence=2)
    assert problems[5].message.startswith("sequence step 3: output 'OUTPUT0'")
    assert problems[5].line == line_with(text, '"OUTPUT0"', occurrence=3)


def test_validate_reports_sequence_problems_with_file_and_line(tmp_path):
    root = write_tree(
        tmp_path / "model_repository",
        {
            "acc/config.pbtxt": sequence_config("acc"),
            "acc/1/model.py": ACCUMULATOR_MODEL,
            "acc/golden/plain.json": golden_case(shape=(1,), data=(1,), out=(1,), dtype="INT32"),
            "acc/golden/steps.json": sequence_case((1, 1), (2, 3)),
            "plain/config.pbtxt": python_config("plain", max_batch_size=0, dims="[ 1 ]", dtype="TYPE_INT32"),
            "plain/1/model.py": ACCUMULATOR_MODEL,
            "plain/golden/steps.json": sequence_case((1, 1)),
        },
    )
    problems = [str(p) for p in validate(root).problems]
    assert len(problems) == 2, problems
    assert any("acc/golden/plain.json:2: acc/config.pbtxt has sequence_batching" in p for p in problems)
    assert any("plain/golden/steps.json:2: a sequence case, but plain/config.pbtxt has no" in p for p in problems)


# -- warnings -------------------------------------------------------------------------------------


def test_error_true_is_warned_about(tmp_path):
    text = sequence_case((1, 1), (-1, "x")).replace('"x"', "true")
    case, model = accumulator(tmp_path, case=text)
    warnings = golden.case_warnings(case, model)
    assert len(warnings) == 1 and warnings[0].message.startswith('sequence step 2: "error": true passes on any')
    assert "record" in warnings[0].message and warnings[0].line == line_with(text, '"error"')


def test_steps_without_outputs_are_warned_about_by_index(tmp_path):
    raw = json.loads(sequence_case((1, 1), (2, 3), (3, 6)))
    del raw["sequence"][0]["outputs"], raw["sequence"][2]["outputs"]
    case, model = accumulator(tmp_path, case=json.dumps(raw))
    warnings = golden.case_warnings(case, model)
    assert len(warnings) == 1 and warnings[0].message.startswith('sequence steps 1, 3: no "outputs"')
    assert case.unrecorded


def test_a_recorded_sequence_has_no_warning(tmp_path):
    case, model = accumulator(tmp_path)
    assert golden.case_warnings(case, model) == []


# -- an expected error judged ---------------------------------------------------------------------

MESSAGE = (
    "Failed to process the request(s) for model 'refuse_0', message: TritonModelException: negative "
    "input -1: amounts must be at least 0\n\nAt:\n  /models/refuse/1/model.py(11): execute\n"
)


def error_case(tmp_path, expected) -> golden.GoldenCase:
    return loaded(
        tmp_path,
        json.dumps(
            {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": [-1]}], "error": expected}
        ),
        "refuse",
    )


def test_the_expected_error_passes_and_says_what_it_saw(tmp_path):
    case = error_case(tmp_path, "negative input -1")
    outcome = judge(case, case.steps[0], Reply(error=MESSAGE, status="500"))
    assert outcome.passed
    assert outcome.message == (
        "answered with the expected error: Failed to process the request(s) for model "
        "'refuse_0', message: TritonModelException: negative input -1: amounts must be at least 0"
    )


def test_another_error_fails_showing_both(tmp_path):
    case = error_case(tmp_path, {"regex": "must be positive"})
    outcome = judge(case, case.steps[0], Reply(error="unexpected shape for input 'INPUT0'", status="400"))
    assert not outcome.passed
    assert outcome.message == (
        "expected an error matching /must be positive/, got another error: unexpected shape for input 'INPUT0'"
    )


def test_an_answer_where_an_error_is_expected_fails_saying_the_model_answered(tmp_path):
    case = error_case(tmp_path, "negative input")
    answer = Answer({"OUTPUT0": (np.array([2], np.int32), "INT32", "")})
    outcome = judge(case, case.steps[0], Reply((answer,)))
    assert not outcome.passed
    assert outcome.message == (
        "expected an error containing 'negative input', but the model answered normally (outputs OUTPUT0)"
    )


def test_an_error_where_outputs_are_expected_fails_with_the_servers_message(tmp_path):
    case = loaded(tmp_path, golden_case())
    outcome = judge(case, case.steps[0], Reply(error="no negatives", status="StatusCode.INTERNAL"))
    assert not outcome.passed and outcome.message == "inference failed: [StatusCode.INTERNAL] no negatives"


def test_a_decoupled_error_after_some_responses_is_the_error_seen(tmp_path):
    case = error_case(tmp_path, "stream says no")
    answer = Answer({"OUTPUT0": (np.array([2], np.int32), "INT32", "")})
    assert judge(case, case.steps[0], Reply((answer,), error="stream says no")).passed


def test_a_plain_request_to_a_sequence_model_gets_the_sequence_hint(tmp_path):
    case = loaded(tmp_path, golden_case())
    message = "inference request to model 'acc' must specify a non-zero or non-empty correlation ID"
    outcome = judge(case, case.steps[0], Reply(error=message, status="400"))
    assert "Hint: the model has sequence_batching" in outcome.message


# -- what record writes ---------------------------------------------------------------------------


def test_record_writes_the_first_line_of_an_error_without_the_instance_preamble():
    assert answers.error_json(MESSAGE) == "TritonModelException: negative input -1: amounts must be at least 0"
    assert golden.ExpectedError(answers.error_json(MESSAGE)).matches(MESSAGE)
    assert answers.error_json("no negatives please") == "no negatives please"


def test_record_fills_in_an_error_true_step_and_the_steps_without_outputs(tmp_path):
    raw = json.loads(sequence_case((1, 1), (-1, "x"), (2, 3)))
    raw["sequence"][1]["error"] = True
    del raw["sequence"][2]["outputs"]
    case = loaded(tmp_path, json.dumps(raw))
    total = Answer({"OUTPUT0": (np.array([3], np.int32), "INT32", "")})
    replies = [
        Reply((Answer({"OUTPUT0": (np.array([99], np.int32), "INT32", "")}),)),
        Reply(error="negative amount -1: the total stays 1", status="500"),
        Reply((total,)),
    ]
    written = answers.recorded(case, json.loads(json.dumps(raw)), replies, decoupled=False, overwrite=False)
    assert written["sequence"][0] == raw["sequence"][0]  # recorded already: kept, whatever the answer
    assert written["sequence"][1]["error"] == "negative amount -1: the total stays 1"
    assert written["sequence"][2]["outputs"] == [{"name": "OUTPUT0", "datatype": "INT32", "shape": [1], "data": [3]}]
    path = tmp_path / "again.json"
    path.write_text(json.dumps(written))
    again, problems = golden.load_case(path, "acc")
    assert not problems and not again.unrecorded


def test_record_refuses_an_error_for_a_case_that_expects_outputs_and_says_how_to_write_it(tmp_path):
    raw = json.loads(golden_case())
    del raw["outputs"]
    case = loaded(tmp_path, json.dumps(raw))
    with pytest.raises(answers.NotRecorded) as refused:
        answers.recorded(case, raw, [Reply(error=MESSAGE, status="500")], decoupled=False, overwrite=False)
    assert "answered with an error (Failed to process" in str(refused.value)
    assert 'write "error": true in place of "outputs"' in str(refused.value)
    assert "outputs" not in raw


def test_record_refuses_an_answer_for_a_case_that_expects_an_error(tmp_path):
    case = error_case(tmp_path, True)
    answer = Answer({"OUTPUT0": (np.array([2], np.int32), "INT32", "")})
    raw = {"error": True}
    with pytest.raises(answers.NotRecorded) as refused:
        answers.recorded(case, raw, [Reply((answer,))], decoupled=False, overwrite=True)
    assert "expects an error but the model answered" in str(refused.value) and raw == {"error": True}
