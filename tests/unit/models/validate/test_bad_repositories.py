"""Bad model repositories and golden files, refused by `validate` before anything is built: exit 1,
the message naming the file, the line and the fix. (That `release` refusing them leaves nothing
behind, on the real stack, is tests/faults/test_repository_faults.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.models import PYTHON_MODEL, golden_case, python_config, python_model_files
from support.reports import read_report
from triton_release.cli import main
from triton_release.models.validate import validate
from triton_release.problems import Problem

ENSEMBLE = """name: "e"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "%s" model_version: -1
  input_map { key: "%s" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
"""

CASES = {
    # name: (files written over models a and b, fragments of the message)
    "config syntax error": (
        {"a/config.pbtxt": python_config("a").replace("max_batch_size: 8", "max_batch_size: eight")},
        ["model_repository/a/config.pbtxt:3:"],
    ),
    "unknown config field": (
        {"a/config.pbtxt": python_config("a") + "max_batches: 4\n"},
        ["model_repository/a/config.pbtxt:6:", "max_batches"],
    ),
    "unknown data type enum": (
        {"a/config.pbtxt": python_config("a").replace("TYPE_FP32 dims", "TYPE_FP33 dims", 1)},
        ["model_repository/a/config.pbtxt:4:", "TYPE_FP33"],
    ),
    "duplicate input name": (
        {
            "a/config.pbtxt": python_config("a").replace(
                'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
                'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            )
        },
        ["model_repository/a/config.pbtxt", "INPUT0"],
    ),
    "golden shape does not fit max_batch_size": (
        {"a/golden/big.json": golden_case(shape=(9, 4), data=[0] * 36, out=[1] * 36)},
        ["model_repository/a/golden/big.json", "[batch 1..8]"],
    ),
    "version folder v2": ({"a/v2/model.py": PYTHON_MODEL}, ["model_repository/a/v2"]),
    "version folder 01": ({"a/01/model.py": PYTHON_MODEL}, ["model_repository/a/01", "rename it to 1"]),
    "version folder 0": ({"a/0/model.py": PYTHON_MODEL}, ["model_repository/a/0"]),
    "empty version folder": ({"a/2": None}, ["model_repository/a/2"]),
    "a file where a version folder should be": ({"a/2": "not a folder\n"}, ["model_repository/a/2"]),
    "python model without model.py": (
        {"c/config.pbtxt": python_config("c"), "c/1/weights.bin": b"\0" * 16},
        ["model_repository/c/1", "no model.py"],
    ),
    "model.py with a syntax error": (
        {
            "c/config.pbtxt": python_config("c"),
            "c/1/model.py": PYTHON_MODEL.replace("def execute(self, requests):", "def execute("),
        },
        ["model_repository/c/1/model.py:6:", "syntax error"],
    ),
    "ensemble naming a missing model": (
        {"e/config.pbtxt": ENSEMBLE % ("nope", "INPUT0"), "e/1": None},
        ["model_repository/e/config.pbtxt", "nope"],
    ),
    "ensemble with a wrong tensor name": (
        {"e/config.pbtxt": ENSEMBLE % ("a", "INPUTX"), "e/1": None},
        ["model_repository/e/config.pbtxt", "INPUTX"],
    ),
    "model name with a space": (
        {
            **{k.replace("b/", "b c/"): v for k, v in python_model_files("b").items()},
            "b c/config.pbtxt": python_config("b c"),
        },
        ["model_repository/b c"],
    ),
    "config name climbing out with ..": (
        {"c/config.pbtxt": python_config("../c"), "c/1/model.py": PYTHON_MODEL},
        ["model_repository/c/config.pbtxt", "../c"],
    ),
    "model name with shell metacharacters": (
        {
            **{k.replace("b/", "b;rm -rf/"): v for k, v in python_model_files("b").items()},
            "b;rm -rf/config.pbtxt": python_config("b;rm -rf"),
        },
        ["model_repository/b;rm -rf"],
    ),
    "malformed golden JSON": (
        {"a/golden/bad.json": '{"inputs": [\n  {"name": "INPUT0",, }]}'},
        ["model_repository/a/golden/bad.json:2:", "not valid JSON"],
    ),
    "golden unknown input": (
        {"a/golden/bad.json": golden_case().replace('"INPUT0"', '"INPUTX"')},
        ["model_repository/a/golden/bad.json", "INPUTX"],
    ),
    "golden wrong data type": (
        {"a/golden/bad.json": golden_case().replace('"FP32"', '"INT32"', 1)},
        ["model_repository/a/golden/bad.json", "INT32"],
    ),
    "golden data count does not match its shape": (
        {"a/golden/bad.json": golden_case(data=(1, 2, 3))},
        ["model_repository/a/golden/bad.json"],
    ),
    "golden BYTES given as numbers": (
        {
            "a/golden/bad.json": json.dumps(
                {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
            )
        },
        ["model_repository/a/golden/bad.json", "BYTES"],
    ),
}


@pytest.fixture
def two_models(make_repo):
    """The models a and b with a case's files written over them: the model repository."""
    return lambda files: make_repo({**python_model_files("a"), **python_model_files("b"), **files})


def assert_refused(root, tmp_path, capsys, *fragments: str) -> None:
    """`validate` exits 1; its JSON report's message and its printed problems hold every fragment:
    the file, the line, the fix."""
    report = tmp_path / "report.json"
    code = main(["validate", "--model-repository", str(root), "--report", str(report)])
    out = capsys.readouterr()
    printed = out.out + out.err
    assert code == 1, printed
    data = read_report(report)
    listed = "\n".join(
        str(Problem(Path(p["path"]), p["message"], p["line"], p["col"])) for p in data["steps"]["validate"]["problems"]
    )
    for fragment in fragments:
        assert fragment in listed, (fragment, listed)
        assert fragment in printed, (fragment, printed)
    count = len(data["steps"]["validate"]["problems"])
    assert f"{count} problem{'s' if count > 1 else ''} found in" in data["error"]["message"]
    assert "Traceback" not in printed
    assert not validate(root).ok


@pytest.mark.parametrize("case", list(CASES))
def test_bad_repository_is_refused(two_models, tmp_path, capsys, case):
    files, fragments = CASES[case]
    assert_refused(two_models(files), tmp_path, capsys, *fragments)


def test_a_symlink_leaving_the_repository_is_refused(two_models, tmp_path, capsys):
    outside = tmp_path / "secret.txt"
    outside.write_text("outside\n")
    root = two_models({})
    os.symlink(outside, root / "a" / "1" / "data.txt")
    assert_refused(root, tmp_path, capsys, "model_repository/a/1/data.txt")
