"""What tritonserver would refuse to load, or silently ignore, found by validate: an ensemble
step fed by a tensor nothing makes, a config-less model that cannot complete its config, a
requirements.txt in a version folder, a data type misspelt, an ensemble's version folder lost
by git."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.models import (
    PYTHON_MODEL,
    auto_complete_files,
    ensemble_files,
    golden_case,
    python_config,
    python_model_files,
)
from support.reports import read_report
from triton_release.cli.main import main
from triton_release.models.validate import validate
from triton_release.problems import Problem

ENSEMBLE_CASE = golden_case().replace('"INPUT0"', '"IN"').replace('"OUTPUT0"', '"OUT"')


def only_problem(root):
    found = [str(p) for p in validate(root).problems]
    assert len(found) == 1, found
    return validate(root).problems[0]


# -- 1. an ensemble step's input_map naming a tensor nothing produces -------------------------


def chain(*steps: tuple[str, str, str]) -> str:
    """An ensemble IN -> OUT whose steps are (model, input tensor, output tensor), one per line."""
    lines = ",\n".join(
        f'  {{ model_name: "{m}" model_version: -1 input_map {{ key: "INPUT0" value: "{i}" }} '
        f'output_map {{ key: "OUTPUT0" value: "{o}" }} }}'
        for m, i, o in steps
    )
    return (
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f"ensemble_scheduling {{ step [\n{lines}\n] }}\n"
    )


def ensemble_repo(make_repo, config: str):
    return make_repo(
        {
            **python_model_files("a"),
            **python_model_files("b"),
            "ens/config.pbtxt": config,
            "ens/1/.gitkeep": "",
            "ens/golden/basic.json": ENSEMBLE_CASE,
        }
    )


def test_a_step_input_that_no_step_produces_names_the_tensor_the_step_and_what_exists(make_repo):
    root = ensemble_repo(make_repo, chain(("a", "IN", "mid"), ("b", "midd", "OUT")))
    problem = only_problem(root)
    assert problem.path == root / "ens" / "config.pbtxt" and problem.line == 8
    assert (
        "step 'b' maps its input 'INPUT0' from tensor 'midd', which is neither an ensemble input nor "
        "produced by any step's output_map (ensemble inputs: IN; step outputs: OUT, mid)"
    ) in problem.message
    assert "fix the name, or add a step" in problem.message


def test_steps_may_be_listed_in_any_order(make_repo):
    assert validate(ensemble_repo(make_repo, chain(("b", "mid", "OUT"), ("a", "IN", "mid")))).ok


def test_the_shipped_ensemble_helper_is_valid(make_repo):
    root = make_repo(
        {
            **python_model_files("a"),
            **python_model_files("b"),
            **ensemble_files("ens", ["a", "b"]),
            "ens/golden/basic.json": ENSEMBLE_CASE,
        }
    )
    assert validate(root).ok


# -- 2. no config.pbtxt and no auto_complete_config -------------------------------------------


def test_a_model_without_config_or_auto_complete_config_is_refused(make_repo):
    root = make_repo({"auto/1/model.py": PYTHON_MODEL, "auto/golden/basic.json": golden_case()})
    problem = only_problem(root)
    assert problem.path == root / "auto" / "1" / "model.py" and problem.line == 5  # class TritonPythonModel
    assert "auto has no config.pbtxt and model.py defines no auto_complete_config" in problem.message
    assert "tritonserver cannot load the model" in problem.message
    assert "auto/config.pbtxt, or define auto_complete_config" in problem.message


def test_auto_complete_config_makes_a_config_unnecessary(make_repo):
    assert validate(make_repo(auto_complete_files("auto"))).ok


def test_only_the_newest_version_is_read(make_repo):
    files = auto_complete_files("auto")
    root = make_repo({**files, "auto/1/model.py": PYTHON_MODEL, "auto/2/model.py": files["auto/1/model.py"]})
    assert validate(root).ok
    root = make_repo({**files, "auto/2/model.py": PYTHON_MODEL})
    assert only_problem(root).path == root / "auto" / "2" / "model.py"


def test_a_model_class_imported_or_inherited_is_not_second_guessed(make_repo):
    root = make_repo(
        {
            "imp/1/model.py": "from shared_models import TritonPythonModel\n",
            "sub/1/model.py": "from base import Base\n\nclass TritonPythonModel(Base):\n    pass\n",
            "imp/golden/basic.json": golden_case(),
            "sub/golden/basic.json": golden_case(),
        }
    )
    assert validate(root).ok


def test_a_config_that_does_not_parse_is_not_taken_for_a_missing_one(make_repo):
    root = make_repo(
        {
            "m/config.pbtxt": "max_batch_size: eight\n",
            "m/1/model.py": PYTHON_MODEL,
            "m/golden/basic.json": golden_case(),
        }
    )
    assert "auto_complete_config" not in only_problem(root).message


def test_the_model_file_is_read_never_run(make_repo, tmp_path):
    marker = tmp_path / "ran"
    root = make_repo(
        {
            "auto/1/model.py": f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n",
            "auto/golden/basic.json": golden_case(),
        }
    )
    assert "auto_complete_config" in only_problem(root).message
    assert not marker.exists()


# -- 3. a requirements.txt inside a version folder --------------------------------------------


def test_requirements_in_a_version_folder_is_ignored_and_moved(make_repo):
    root = make_repo({**python_model_files("m"), "m/1/requirements.txt": "numpy==1.26.4\n"})
    problem = only_problem(root)
    assert problem.path == root / "m" / "1" / "requirements.txt"
    assert "inside version folder 1 is ignored" in problem.message
    assert problem.message.endswith(f"move it to {root / 'm' / 'requirements.txt'}")


def test_requirements_in_both_places_are_merged(make_repo):
    root = make_repo(
        {
            **python_model_files("m"),
            "m/requirements.txt": "numpy==1.26.4\n",
            "m/2/model.py": PYTHON_MODEL,
            "m/2/requirements.txt": "scipy==1.13.0\n",
        }
    )
    problem = only_problem(root)
    assert problem.path == root / "m" / "2" / "requirements.txt"
    assert problem.message.endswith(f"merge its lines into {root / 'm' / 'requirements.txt'}")


# -- 4. a data type misspelt ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("TYPE_FLOAT32", "TYPE_FP32"),
        ("TYPE_FLOAT", "TYPE_FP32"),
        ("FLOAT32", "TYPE_FP32"),
        ("FP32", "TYPE_FP32"),
        ("type_fp32", "TYPE_FP32"),
        ("TYPE_FLOAT16", "TYPE_FP16"),
        ("TYPE_HALF", "TYPE_FP16"),
        ("TYPE_FLOAT64", "TYPE_FP64"),
        ("TYPE_DOUBLE", "TYPE_FP64"),
        ("TYPE_INT", "TYPE_INT32"),
        ("TYPE_STR", "TYPE_STRING"),
        ("STRING", "TYPE_STRING"),
        ("TYPE_BYTES", "TYPE_STRING"),
        ("TYPE_BFLOAT16", "TYPE_BF16"),
        ("TYPE_BOOLEAN", "TYPE_BOOL"),
        ("TYPE_FP33", "TYPE_FP32"),
        ("TYPE_UINT08", "TYPE_UINT8"),
        ("TYPE_STRNG", "TYPE_STRING"),
    ],
)
def test_a_misspelt_data_type_gets_a_did_you_mean(make_repo, typo, meant):
    config = python_config("m").replace("data_type: TYPE_FP32", f"data_type: {typo}", 1)
    problem = only_problem(make_repo({**python_model_files("m"), "m/config.pbtxt": config}))
    assert (problem.line, problem.col) == (4, 37)
    assert f"has no value named {typo}; did you mean {meant}? (Triton's model config schema)" in problem.message


def test_a_quoted_data_type_is_told_to_lose_its_quotes(make_repo):
    config = python_config("m").replace("data_type: TYPE_FP32", 'data_type: "TYPE_FP32"', 1)
    problem = only_problem(make_repo({**python_model_files("m"), "m/config.pbtxt": config}))
    assert problem.message.endswith("write it without quotes: TYPE_FP32 (Triton's model config schema)")


def test_other_enums_get_a_close_match_and_nonsense_the_list(make_repo):
    config = python_config("m") + "instance_group [ { kind: KIND_GPUU } ]\n"
    assert (
        "did you mean KIND_GPU?"
        in only_problem(make_repo({**python_model_files("m"), "m/config.pbtxt": config})).message
    )
    config = python_config("m").replace("data_type: TYPE_FP32", "data_type: TYPE_QQQQQQQQ", 1)
    message = only_problem(make_repo({**python_model_files("m"), "m/config.pbtxt": config})).message
    assert "the values are TYPE_BOOL, TYPE_UINT8" in message and "TYPE_INVALID" not in message


# -- 5. an ensemble whose empty version folder git did not keep -------------------------------


def test_an_ensemble_without_its_version_folder_is_told_to_keep_it_in_git(make_repo):
    config = chain(("a", "IN", "mid"), ("b", "mid", "OUT"))
    root = make_repo(
        {
            **python_model_files("a"),
            **python_model_files("b"),
            "ens/config.pbtxt": config,
            "ens/golden/basic.json": ENSEMBLE_CASE,
        }
    )
    problem = only_problem(root)
    assert problem.path == root / "ens"
    assert "Triton needs one even for an ensemble (an empty 1/), and git keeps no empty folders" in problem.message
    assert problem.message.endswith(f"add an empty file {root / 'ens' / '1' / '.gitkeep'} and commit it")
    (root / "ens" / "1").mkdir()
    (root / "ens" / "1" / ".gitkeep").write_text("")
    assert validate(root).ok


def test_a_model_without_version_folder_keeps_its_message(make_repo):
    root = make_repo({"m/config.pbtxt": python_config("m"), "m/golden/basic.json": golden_case()})
    assert only_problem(root).message == f"no version folder: put the model's files in {root / 'm' / '1'}/"


# -- each refused by the command, exit 1, naming file, line and fix ---------------------------

CLI_CASES = {
    "step input nobody produces": (
        {"ens/config.pbtxt": chain(("a", "IN", "mid"), ("b", "midd", "OUT")), "ens/1/.gitkeep": ""},
        ["ens/config.pbtxt:8:", "'midd'"],
    ),
    "no config, no auto_complete_config": ({"c/1/model.py": PYTHON_MODEL}, ["c/1/model.py:5:", "auto_complete_config"]),
    "requirements in a version folder": ({"a/1/requirements.txt": "numpy\n"}, ["a/1/requirements.txt:", "move it to"]),
    "data type typo": (
        {"a/config.pbtxt": python_config("a").replace("TYPE_FP32 dims", "TYPE_FLOAT32 dims", 1)},
        ["a/config.pbtxt:4:37:", "did you mean TYPE_FP32?"],
    ),
    "ensemble version folder lost": ({"ens/config.pbtxt": chain(("a", "IN", "OUT"))}, ["ens/1/.gitkeep"]),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_validate_refuses_with_file_line_and_fix(make_repo, tmp_path, capsys, case):
    files, fragments = CLI_CASES[case]
    root = make_repo({**python_model_files("a"), **python_model_files("b"), **files})
    report = tmp_path / "report.json"
    code = main(["validate", "--model-repository", str(root), "--report", str(report)])
    printed = "".join(capsys.readouterr())
    assert code == 1, printed
    problems = read_report(report)["steps"]["validate"]["problems"]
    listed = "\n".join(str(Problem(Path(p["path"]), p["message"], p["line"], p["col"])) for p in problems)
    for fragment in fragments:
        assert fragment in listed and fragment in printed, (fragment, printed)
    assert "Traceback" not in printed
