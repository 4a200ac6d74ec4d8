"""Every validate rule, with a good and a bad case."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.models import PYTHON_MODEL, auto_complete_files, golden_case, python_config, python_model_files
from support.reports import parse_report, read_report
from support.stack import ROOT
from triton_release.cli.main import main
from triton_release.models.validate import validate

EXAMPLE = ROOT / "model_repository"


def messages(root: Path) -> list[str]:
    return [str(p) for p in validate(root).problems]


def only_problem(root: Path) -> str:
    found = messages(root)
    assert len(found) == 1, found
    return found[0]


def test_example_repository_is_valid():
    result = validate(EXAMPLE)
    assert result.ok, [str(p) for p in result.problems]
    assert len(result.models) >= 4 and result.golden_cases >= 5


def test_good_python_model(make_repo):
    result = validate(make_repo(python_model_files("m")))
    assert result.ok and result.models == ("m",) and result.golden_cases == 1 and not result.warnings


def test_unknown_enum_on_line_5_names_file_line_and_value(make_repo, capsys):
    config = 'name: "m"\nbackend: "python"\nmax_batch_size: 0\ninput [ { name: "INPUT0"\n data_type: TYPE_FP33 dims: [ 4 ] } ]\n'
    root = make_repo({**python_model_files("m"), "m/config.pbtxt": config})
    problem = validate(root).problems[0]
    assert (problem.line, problem.path.name) == (5, "config.pbtxt") and "TYPE_FP33" in problem.message
    assert main(["validate", "--model-repository", str(root)]) == 1
    out = capsys.readouterr()
    assert "config.pbtxt:5:" in out.out and "TYPE_FP33" in out.out
    assert "config.pbtxt:5:" not in out.err and "1 problem found in 1 of 1 model" in out.err and "Fix it" in out.err


def test_unknown_field_is_located(make_repo):
    root = make_repo({**python_model_files("m"), "m/config.pbtxt": python_config("m") + "max_batch: 4\n"})
    problem = validate(root).problems[0]
    assert problem.line == 6 and "max_batch" in problem.message


def test_config_name_must_match_folder(make_repo):
    root = make_repo({**python_model_files("m"), "m/config.pbtxt": python_config("other")})
    assert "differs from the model's folder 'm'" in only_problem(root)


def test_backend_or_platform_required(make_repo):
    """Unless the version folder holds model.py, from which Triton takes the python backend."""
    config = python_config("m").replace('backend: "python"\n', "")
    files = {**python_model_files("m"), "m/config.pbtxt": config}
    root = make_repo(files)
    assert validate(root).ok
    (root / "m/1/model.py").rename(root / "m/1/weights.bin")
    assert "neither backend nor platform" in only_problem(root)


def test_duplicate_input_name(make_repo):
    config = python_config("m").replace(
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
    )
    assert "input 'INPUT0' is declared 2 times" in only_problem(
        make_repo({**python_model_files("m"), "m/config.pbtxt": config})
    )


def test_dims_must_be_positive_or_variable(make_repo):
    root = make_repo(
        {
            **python_model_files("m"),
            "m/config.pbtxt": python_config("m", dims="[ 0 ]"),
            "m/golden/basic.json": golden_case(shape=(1, 0), data=(), out=()),
        }
    )
    assert all("each dimension is positive" in m for m in messages(root))


def test_no_dims_without_batching(make_repo):
    root = make_repo(
        {
            **python_model_files("m"),
            "m/config.pbtxt": python_config("m", max_batch_size=0, dims="[ ]"),
            "m/golden/basic.json": golden_case(shape=(), data=(1,), out=(2,)),
        }
    )
    assert any("has no dims" in m for m in messages(root))


@pytest.mark.parametrize(
    ("folder", "fix"), [("01", "rename it to 1"), ("v2", "rename it to 2"), ("0", "version numbers start at 1")]
)
def test_odd_version_folders(make_repo, folder, fix):
    root = make_repo({**python_model_files("m"), f"m/{folder}/model.py": PYTHON_MODEL})
    problem = only_problem(root)
    assert f"Triton ignores the folder '{folder}'" in problem and fix in problem


def test_file_where_version_folder_expected(make_repo):
    root = make_repo({**python_model_files("m"), "m/2": "not a folder"})
    assert "is a file where a version folder is expected" in only_problem(root)


def test_no_version_folder(make_repo):
    root = make_repo({"m/config.pbtxt": python_config("m"), "m/golden/basic.json": golden_case()})
    assert "no version folder" in only_problem(root)


def test_empty_version_folder(make_repo):
    root = make_repo({**python_model_files("m"), "m/2": None})
    assert "version folder is empty" in only_problem(root)


def test_python_model_needs_model_py(make_repo):
    root = make_repo({**python_model_files("m"), "m/2/weights.bin": b"\x00\x01"})
    problem = only_problem(root)
    assert "no model.py" in problem and os.path.join("m", "2") in problem


def test_model_py_with_a_syntax_error_names_the_line(make_repo):
    files = python_model_files("m")
    files["m/1/model.py"] = PYTHON_MODEL.replace("def execute(self, requests):", "def execute(self, requests)")
    problem = only_problem(make_repo(files))
    assert problem.endswith(
        "model_repository/m/1/model.py:6:32: Python syntax error: expected ':'; fix it "
        "(tritonserver would fail to load the model)"
    )


def test_default_model_filename_is_respected(make_repo):
    config = python_config("m") + 'default_model_filename: "serve.py"\n'
    root = make_repo({"m/config.pbtxt": config, "m/1/serve.py": PYTHON_MODEL, "m/golden/basic.json": golden_case()})
    assert validate(root).ok


def test_python_model_without_config_is_accepted(make_repo):
    root = make_repo(auto_complete_files("auto"))
    assert validate(root).ok


def test_model_without_config_needs_model_py(make_repo):
    root = make_repo({"auto/1/weights.bin": b"\x00"})
    assert "a model without config.pbtxt (auto-complete) needs" in only_problem(root)


def ensemble(steps: str, outputs: str = 'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]') -> str:
    return (
        f'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]\n{outputs}\n'
        f"ensemble_scheduling {{ step [ {steps} ] }}\n"
    )


GOOD_STEP = (
    '{ model_name: "m" model_version: -1 input_map { key: "INPUT0" value: "INPUT0" } '
    'output_map { key: "OUTPUT0" value: "OUTPUT0" } }'
)


def test_good_ensemble(make_repo):
    root = make_repo(
        {
            **python_model_files("m"),
            "ens/config.pbtxt": ensemble(GOOD_STEP),
            "ens/1": None,
            "ens/golden/basic.json": golden_case(),
        }
    )
    assert validate(root).ok


def test_ensemble_step_naming_a_missing_model(make_repo):
    root = make_repo(
        {
            **python_model_files("m"),
            "ens/config.pbtxt": ensemble(GOOD_STEP.replace('"m"', '"gone"')),
            "ens/1": None,
            "ens/golden/basic.json": golden_case(),
        }
    )
    found = messages(root)
    assert any("step model 'gone' is not in the model repository" in m and ":6:" in m for m in found), found


def test_ensemble_step_with_a_wrong_tensor_name(make_repo):
    root = make_repo(
        {
            **python_model_files("m"),
            "ens/config.pbtxt": ensemble(GOOD_STEP.replace('key: "INPUT0"', 'key: "IN"')),
            "ens/1": None,
            "ens/golden/basic.json": golden_case(),
        }
    )
    assert "maps input 'IN', which m does not declare (its inputs: INPUT0)" in only_problem(root)


def test_ensemble_output_produced_by_no_step(make_repo):
    steps = GOOD_STEP.replace('value: "OUTPUT0"', 'value: "elsewhere"')
    root = make_repo(
        {
            **python_model_files("m"),
            "ens/config.pbtxt": ensemble(steps),
            "ens/1": None,
            "ens/golden/basic.json": golden_case(),
        }
    )
    assert "ensemble output 'OUTPUT0' is produced by no step" in only_problem(root)


def test_symlink_outside_the_repository(make_repo, tmp_path):
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"x")
    root = make_repo(python_model_files("m"))
    (root / "m" / "1" / "weights.bin").symlink_to(outside)
    assert "symbolic link points outside the model repository" in only_problem(root)


@pytest.mark.parametrize("name", ["bad name", "a;rm", "-dash"])
def test_model_names_are_restricted(make_repo, name):
    root = make_repo(python_model_files(name) | {f"{name}/config.pbtxt": python_config(name)})
    assert any("is not allowed" in m for m in messages(root))


# -- golden files --------------------------------------------------------------------------


def test_malformed_golden_json_gives_line_and_column(make_repo):
    root = make_repo({**python_model_files("m"), "m/golden/basic.json": '{\n  "inputs": [\n    {"name": 1,}\n'})
    problem = validate(root).problems[0]
    assert problem.line == 3 and problem.col and "not valid JSON" in problem.message


def test_golden_unknown_input(make_repo):
    case = golden_case().replace('"INPUT0"', '"INPUT9"')
    problem = only_problem(make_repo({**python_model_files("m"), "m/golden/basic.json": case}))
    assert "input 'INPUT9' is not declared in m/config.pbtxt (its inputs: INPUT0)" in problem
    assert "basic.json:4:" in problem


def test_golden_wrong_datatype(make_repo):
    case = golden_case(dtype="FP64")
    found = messages(make_repo({**python_model_files("m"), "m/golden/basic.json": case}))
    assert any("is FP64 here but FP32 in config.pbtxt" in m for m in found)


def test_golden_shape_that_does_not_fit(make_repo):
    case = golden_case(shape=(1, 3), data=(1, 2, 3), out=(2, 3, 4))
    found = messages(make_repo({**python_model_files("m"), "m/golden/basic.json": case}))
    assert any("has shape [1, 3], which does not fit [batch 1..8] + dims [4]" in m for m in found)


def test_golden_batch_larger_than_max_batch_size(make_repo):
    case = golden_case(shape=(9, 4), data=range(36), out=range(36))
    assert any(
        "does not fit" in m for m in messages(make_repo({**python_model_files("m"), "m/golden/basic.json": case}))
    )


TWO_INPUTS = """\
name: "add_sub"
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }{optional}
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def two_inputs(case: dict, optional: bool = False) -> dict[str, str]:
    config = TWO_INPUTS.replace(
        "{optional}", ' ,{ name: "EXTRA" data_type: TYPE_STRING dims: [ -1 ] optional: true }' if optional else ""
    )
    return {
        "add_sub/config.pbtxt": config,
        "add_sub/1/model.py": PYTHON_MODEL,
        "add_sub/golden/basic.json": json.dumps(case, indent=2),
    }


def fp32(name: str, shape=(4,)) -> dict:
    return {"name": name, "datatype": "FP32", "shape": list(shape), "data": [1] * 4}


@pytest.mark.parametrize(
    ("inputs", "lacking"),
    [([fp32("INPUT0")], "'INPUT1'"), ([], "'INPUT0', 'INPUT1'")],
    ids=["one of two inputs", "no inputs"],
)
def test_golden_case_that_leaves_out_a_declared_input_cannot_pass(make_repo, inputs, lacking):
    problem = only_problem(make_repo(two_inputs({"inputs": inputs, "outputs": [fp32("OUTPUT0")]})))
    assert "add_sub/golden/basic.json:2: " in problem and f'"inputs" lacks {lacking}' in problem, problem
    assert "does not mark `optional: true`" in problem and "Add " in problem and '"shape": [4]' in problem


def test_golden_case_may_leave_out_an_optional_input_or_one_an_expected_error_is_about(make_repo):
    both = [fp32("INPUT0"), fp32("INPUT1")]
    assert validate(make_repo(two_inputs({"inputs": both, "outputs": [fp32("OUTPUT0")]}, optional=True))).ok
    assert validate(make_repo(two_inputs({"inputs": [fp32("INPUT0")], "error": "expected 2 inputs"}))).ok


def test_golden_case_against_config_data_types_and_batch_dimension(make_repo):
    bytes_config = python_config("m", max_batch_size=0, dims="[ -1 ]", dtype="TYPE_STRING")
    case = golden_case(shape=(2,), data=("a", "b"), out=("A", "B"), dtype="BYTES")
    assert validate(
        make_repo({**python_model_files("m"), "m/config.pbtxt": bytes_config, "m/golden/basic.json": case})
    ).ok
    unbatched = golden_case(shape=(4,))  # max_batch_size 8: the leading batch dimension is missing
    found = messages(make_repo({**python_model_files("m"), "m/golden/basic.json": unbatched}))
    assert any("has shape [4], which does not fit [batch 1..8] + dims [4]" in m and "[1, 4]" in m for m in found), found


def test_a_misspelt_golden_input_is_one_problem_with_a_did_you_mean(make_repo):
    case = {"inputs": [fp32("INPUT0"), fp32("INPTU1")], "outputs": [fp32("OUTPUT0")]}
    problem = only_problem(make_repo(two_inputs(case)))
    assert "input 'INPTU1' is not declared" in problem and "did you mean 'INPUT1'?" in problem


def test_golden_data_count_must_match_shape(make_repo):
    case = golden_case(data=(1, 2, 3))
    assert 'shape [1, 4] holds 4 elements but "data" has 3' in only_problem(
        make_repo({**python_model_files("m"), "m/golden/basic.json": case})
    )


def test_golden_nested_data_is_accepted(make_repo):
    case = json.loads(golden_case())
    case["inputs"][0]["data"] = [[1, 2, 3, 4]]
    assert validate(make_repo({**python_model_files("m"), "m/golden/basic.json": json.dumps(case)})).ok


def test_golden_bytes_given_as_numbers(make_repo):
    config = python_config("m", max_batch_size=0, dims="[ -1 ]", dtype="TYPE_STRING")
    case = golden_case(shape=(2,), data=(1, 2), out=("a", "b"), dtype="BYTES")
    problem = only_problem(
        make_repo({**python_model_files("m"), "m/config.pbtxt": config, "m/golden/basic.json": case})
    )
    assert "of a BYTES tensor is 1; write text as a string" in problem


def test_golden_unknown_key(make_repo):
    case = golden_case(tolerance=0.1)
    assert "unknown key 'tolerance'" in only_problem(
        make_repo({**python_model_files("m"), "m/golden/basic.json": case})
    )


def test_golden_unknown_datatype(make_repo):
    case = golden_case(dtype="FLOAT")
    assert (
        "'FLOAT' is not a KServe v2 type"
        in messages(make_repo({**python_model_files("m"), "m/golden/basic.json": case}))[0]
    )


def test_golden_decoupled_responses_are_checked(make_repo):
    case = json.loads(golden_case())
    case["outputs"] = [[case["outputs"][0]], [dict(case["outputs"][0], name="NOPE")]]
    decoupled = python_config("m") + "model_transaction_policy { decoupled: true }\n"
    assert "output 'NOPE' is not declared" in only_problem(
        make_repo({**python_model_files("m"), "m/config.pbtxt": decoupled, "m/golden/basic.json": json.dumps(case)})
    )


def test_no_golden_cases_is_a_warning_not_a_problem(make_repo):
    files = python_model_files("m")
    del files["m/golden/basic.json"]
    result = validate(make_repo(files))
    assert result.ok and "no golden cases" in str(result.warnings[0])


def test_every_problem_is_reported(make_repo):
    root = make_repo(
        {
            **python_model_files("a"),
            **python_model_files("b"),
            "a/config.pbtxt": python_config("a", dtype="TYPE_FP33"),
            "b/01/model.py": PYTHON_MODEL,
            "b/golden/bad.json": "{",
        }
    )
    found = messages(root)
    assert len(found) == 4, found  # both tensors of a's config are TYPE_FP33: each is a problem
    assert [m.split("config.pbtxt:")[1][:5] for m in found[:2]] == ["4:37:", "5:39:"], found


# -- the command ---------------------------------------------------------------------------


def test_validate_json_report(make_repo, capsys, tmp_path):
    root = make_repo({**python_model_files("m"), "m/01/model.py": PYTHON_MODEL})
    report_file = tmp_path / "report.json"
    assert main(["validate", "--model-repository", str(root), "--json", "--report", str(report_file)]) == 1
    report = parse_report(capsys.readouterr().out)
    assert report == read_report(report_file)
    assert report["command"] == "validate" and report["ok"] is False and report["error"]["exit_code"] == 1
    assert report["steps"]["validate"]["problems"][0]["path"].endswith(os.path.join("m", "01"))


def test_missing_repository_is_a_usage_error(tmp_path, capsys):
    assert main(["validate", "--model-repository", str(tmp_path / "nope")]) == 2
    assert "no such model repository" in capsys.readouterr().err


def test_every_problem_of_every_model_in_one_run_each_printed_once(make_repo, capsys):
    """Config errors past the first, a golden file's reader problems and its checks against the
    config: all in one run; the closing line only counts them."""
    config = python_config("a", dtype="TYPE_FP33") + "max_batch: 4\n"
    root = make_repo(
        {
            **python_model_files("a"),
            **python_model_files("b"),
            "a/config.pbtxt": config,
            "b/golden/basic.json": golden_case(timeout=-1).replace('"INPUT0"', '"INPTU0"'),
        }
    )
    assert main(["validate", "--model-repository", str(root)]) == 1
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert any("config.pbtxt:4:" in line and "TYPE_FP33" in line for line in lines), lines
    assert any("config.pbtxt:5:" in line and "TYPE_FP33" in line for line in lines), lines
    assert any("config.pbtxt:6:1:" in line and "did you mean max_batch_size?" in line for line in lines), lines
    assert any("basic.json:" in line and '"timeout" must be' in line for line in lines), lines
    assert any("input 'INPTU0' is not declared" in line and "did you mean 'INPUT0'?" in line for line in lines)
    assert out.err.strip().endswith(
        "5 problems found in 2 of 2 models (listed above as file:line:col). "
        "Fix them and run `triton-release validate` again."
    ), out.err
    assert "TYPE_FP33" not in out.err and "timeout" not in out.err


def test_a_misspelt_golden_case_key_gets_the_key_meant(make_repo):
    case = golden_case().replace('"outputs"', '"outptus"')
    assert "unknown key 'outptus'; did you mean 'outputs'?" in only_problem(
        make_repo({**python_model_files("m"), "m/golden/basic.json": case})
    )
