"""Bad model repositories and golden files, thrown at `release`: exit 1 naming the file and line,
nothing pushed, the working tree as it was, no container."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import BASE_IMAGE, PYTHON_MODEL, golden_case, python_config, python_model_files

from conftest import assert_refused_cleanly

ENSEMBLE = '''name: "e"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "%s" model_version: -1
  input_map { key: "%s" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
'''

MEASURE = ("import re, sys; from triton_release.cli.main import main; code = main(sys.argv[1:]); "
           "status = open('/proc/self/status').read(); "
           "print('PEAK_KIB', re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr); sys.exit(code)")

CASES = {
    # name: (files written, fragments of the message)
    "config syntax error": ({"a/config.pbtxt": python_config("a").replace("max_batch_size: 8", "max_batch_size: eight")},
                            ["model_repository/a/config.pbtxt:3:"]),
    "unknown config field": ({"a/config.pbtxt": python_config("a") + "max_batches: 4\n"},
                             ["model_repository/a/config.pbtxt:6:", "max_batches"]),
    "unknown data type enum": ({"a/config.pbtxt": python_config("a").replace("TYPE_FP32 dims", "TYPE_FP33 dims", 1)},
                               ["model_repository/a/config.pbtxt:4:", "TYPE_FP33"]),
    "duplicate input name": ({"a/config.pbtxt": python_config("a").replace(
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]')},
                             ["model_repository/a/config.pbtxt", "INPUT0"]),
    "golden shape does not fit max_batch_size": ({"a/golden/big.json": golden_case(shape=(9, 4), data=[0] * 36, out=[1] * 36)},
                                                 ["model_repository/a/golden/big.json", "[batch 1..8]"]),
    "version folder v2": ({"a/v2/model.py": PYTHON_MODEL}, ["model_repository/a/v2"]),
    "version folder 01": ({"a/01/model.py": PYTHON_MODEL}, ["model_repository/a/01", "rename it to 1"]),
    "version folder 0": ({"a/0/model.py": PYTHON_MODEL}, ["model_repository/a/0"]),
    "empty version folder": ({"a/2": None}, ["model_repository/a/2"]),
    "a file where a version folder should be": ({"a/2": "not a folder\n"}, ["model_repository/a/2"]),
    "python model without model.py": ({"c/config.pbtxt": python_config("c"), "c/1/weights.bin": b"\0" * 16},
                                      ["model_repository/c/1", "no model.py"]),
    "model.py with a syntax error": ({"c/config.pbtxt": python_config("c"),
                                      "c/1/model.py": PYTHON_MODEL.replace("def execute(self, requests):", "def execute(")},
                                     ["model_repository/c/1/model.py:6:", "syntax error"]),
    "ensemble naming a missing model": ({"e/config.pbtxt": ENSEMBLE % ("nope", "INPUT0"), "e/1": None},
                                        ["model_repository/e/config.pbtxt", "nope"]),
    "ensemble with a wrong tensor name": ({"e/config.pbtxt": ENSEMBLE % ("a", "INPUTX"), "e/1": None},
                                          ["model_repository/e/config.pbtxt", "INPUTX"]),
    "model name with a space": ({**{k.replace("b/", "b c/"): v for k, v in python_model_files("b").items()},
                                 "b c/config.pbtxt": python_config("b c")}, ["model_repository/b c"]),
    "config name climbing out with ..": ({"c/config.pbtxt": python_config("../c"), "c/1/model.py": PYTHON_MODEL},
                                         ["model_repository/c/config.pbtxt", "../c"]),
    "model name with shell metacharacters": ({**{k.replace("b/", "b;rm -rf/"): v for k, v in python_model_files("b").items()},
                                              "b;rm -rf/config.pbtxt": python_config("b;rm -rf")},
                                             ["model_repository/b;rm -rf"]),
    "malformed golden JSON": ({"a/golden/bad.json": '{"inputs": [\n  {"name": "INPUT0",, }]}'},
                              ["model_repository/a/golden/bad.json:2:", "not valid JSON"]),
    "golden unknown input": ({"a/golden/bad.json": golden_case().replace('"INPUT0"', '"INPUTX"')},
                             ["model_repository/a/golden/bad.json", "INPUTX"]),
    "golden wrong data type": ({"a/golden/bad.json": golden_case().replace('"FP32"', '"INT32"', 1)},
                               ["model_repository/a/golden/bad.json", "INT32"]),
    "golden data count does not match its shape": ({"a/golden/bad.json": golden_case(data=(1, 2, 3))},
                                                   ["model_repository/a/golden/bad.json"]),
    "golden BYTES given as numbers": ({"a/golden/bad.json": json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 4], "data": [1, 2, 3, 4]}]})},
                                      ["model_repository/a/golden/bad.json", "BYTES"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_repository_is_refused_cleanly(ws, case):
    files, fragments = CASES[case]
    ws.write(files)
    ws.commit(case)
    before = ws.state()
    outcome = ws.release()
    assert_refused_cleanly(ws, before, outcome, 1, *fragments)
    assert "build" not in outcome.report.get("steps", {})  # refused before any build


def test_a_symlink_leaving_the_repository_is_refused(ws, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("outside\n")
    os.symlink(outside, ws.models / "a" / "1" / "data.txt")
    ws.commit("a link out")
    before = ws.state()
    assert_refused_cleanly(ws, before, ws.release(), 1, "model_repository/a/1/data.txt")


def test_a_golden_case_expecting_an_output_the_model_lacks_fails_in_the_test_step(ws):
    case = json.loads(golden_case())
    case["outputs"][0]["name"] = "OUTPUT9"
    ws.write({"a/golden/missing.json": json.dumps(case),
              "a/config.pbtxt": python_config("a").replace("OUTPUT0", "OUTPUT0") +
              'output [ { name: "OUTPUT9" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'})
    ws.commit("a declares OUTPUT9, model.py never sends it")
    before = ws.state()
    outcome = ws.release()
    assert_refused_cleanly(ws, before, outcome, 1, "golden cases failed", "OUTPUT9")


def test_nan_and_infinity_compare_as_written(ws):
    """NaN equals NaN only where NaN is expected; inf equals inf."""
    nan_model = PYTHON_MODEL.replace("(x + 1)", "(x / 0.0)")  # 0/0 -> nan, 1/0 -> inf
    ws.write({"a/1/model.py": nan_model,
              "a/golden/basic.json": golden_case(data=(0, 1, -1, 0), out=("NaN", "Infinity", "-Infinity", "NaN"))})
    ws.commit("a: nan and inf")
    outcome = ws.release("--no-push")
    assert outcome.code == 0, outcome.out[-3000:]
    ws.write({"a/golden/basic.json": golden_case(data=(0, 1, -1, 0), out=(0, "Infinity", "-Infinity", "NaN"))})
    ws.commit("a: expects 0 where the model answers nan")
    before = ws.state()
    assert_refused_cleanly(ws, before, ws.release(), 1, "golden cases failed", "worst at [0, 0]")


def test_an_empty_golden_folder_is_a_warning_and_the_report_says_so(ws):
    (ws.models / "b" / "golden" / "basic.json").unlink()
    model_py = ws.models / "b" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\n# changed\n")
    ws.commit("b: no golden cases any more")
    outcome = ws.release("--no-push")
    assert outcome.code == 0, outcome.out[-3000:]
    assert outcome.report["steps"]["test"]["models_without_golden_cases"] == ["b"]
    assert "b has no golden cases" in outcome.out


def test_a_300_mb_weights_file_is_streamed_not_read_into_memory(ws):
    weights = ws.models / "a" / "1" / "weights.bin"
    with open(weights, "wb") as out:
        for _ in range(300):
            out.write(os.urandom(1024 * 1024))
    ws.commit("a: 300 MB of weights")
    done = subprocess.run([sys.executable, "-c", MEASURE, "release",
                           "--to", ws.image, "--base-image", BASE_IMAGE, "--no-push"],
                          cwd=ws.root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    peak_mib = int(done.stderr.rsplit("PEAK_KIB ", 1)[1].split()[0]) / 1024
    print(f"peak resident memory of the release process: {peak_mib:.0f} MiB")
    assert peak_mib < 200  # the 300 MiB file is streamed into the layer, never held (git itself, asked for
    # the released version's files by the bump, holds the blob while it writes it: that is git's memory)
