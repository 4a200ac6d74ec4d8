"""Bad model repositories and golden files thrown at `release` on the real stack. Each bad
repository is refused by `validate` (tests/unit/models/validate/test_bad_repositories.py, in-process, no Docker);
here, once, that `release` refusing one leaves nothing behind, and the faults only a running
release meets: golden cases failing on the server, no golden cases at all, a large weights file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.models import PYTHON_MODEL, golden_case, python_config
from support.stack import BASE_IMAGE
from support.workspace import assert_refused_cleanly

pytestmark = pytest.mark.integration

MEASURE = (
    "import re, sys; from triton_release.cli.main import main; code = main(sys.argv[1:]); "
    "status = open('/proc/self/status').read(); "
    "print('PEAK_KIB', re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr); sys.exit(code)"
)


def test_a_validation_failure_leaves_nothing_behind(ws):
    """Exit 1 naming the file and line, refused before any build: no tag pushed or moved, the
    working tree and its files as they were, no server or probe container."""
    ws.write({"a/config.pbtxt": python_config("a") + "max_batches: 4\n"})
    ws.commit("a: an unknown config field")
    before = ws.state()
    outcome = ws.release()
    assert_refused_cleanly(ws, before, outcome, 1, "1 problem found", "listed above as file:line:col")
    assert "model_repository/a/config.pbtxt:6:" in outcome.out and "max_batches" in outcome.out
    assert "build" not in outcome.report.get("steps", {})


def test_a_golden_case_expecting_an_output_the_model_lacks_fails_in_the_test_step(ws):
    case = json.loads(golden_case())
    case["outputs"][0]["name"] = "OUTPUT9"
    ws.write(
        {
            "a/golden/missing.json": json.dumps(case),
            "a/config.pbtxt": python_config("a").replace("OUTPUT0", "OUTPUT0")
            + 'output [ { name: "OUTPUT9" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
        }
    )
    ws.commit("a declares OUTPUT9, model.py never sends it")
    before = ws.state()
    outcome = ws.release()
    assert_refused_cleanly(ws, before, outcome, 1, "golden cases failed", "OUTPUT9")


def test_nan_and_infinity_compare_as_written(ws):
    """NaN equals NaN only where NaN is expected; inf equals inf."""
    nan_model = PYTHON_MODEL.replace("(x + 1)", "(x / 0.0)")  # 0/0 -> nan, 1/0 -> inf
    ws.write(
        {
            "a/1/model.py": nan_model,
            "a/golden/basic.json": golden_case(data=(0, 1, -1, 0), out=("NaN", "Infinity", "-Infinity", "NaN")),
        }
    )
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
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, "release", "--to", ws.image, "--base-image", BASE_IMAGE, "--no-push"],
        cwd=ws.root,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    peak_mib = int(done.stderr.rsplit("PEAK_KIB ", 1)[1].split()[0]) / 1024
    print(f"peak resident memory of the release process: {peak_mib:.0f} MiB")
    assert peak_mib < 200  # the 300 MiB file is streamed into the layer, never held (git itself, asked for
    # the released version's files by the bump, holds the blob while it writes it: that is git's memory)
