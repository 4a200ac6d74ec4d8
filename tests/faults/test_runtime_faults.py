"""Models that misbehave on a real tritonserver: the release stops at its test step with exit 1,
the model's own words in the output, nothing pushed, the bump undone, no container left."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from support.models import (
    DECOUPLED_CONFIG,
    DECOUPLED_MODEL,
    HANGING_MODEL,
    PYTHON_MODEL,
    PYTHON_MODEL_RAISING,
    SLEEPY_MODEL,
)
from support.reports import read_report
from support.stack import SERVERS
from support.tool import release_command, start
from support.workspace import assert_refused_cleanly

pytestmark = pytest.mark.integration

RAISING_IN_EXECUTE = PYTHON_MODEL.replace(
    "        responses = []\n", "        raise RuntimeError('boom in execute: bad input scaling')\n"
)
WRONG_DTYPE = PYTHON_MODEL.replace(".astype(np.float32)", ".astype(np.float64)")
CRASHING = PYTHON_MODEL.replace("        responses = []\n", "        import os\n        os._exit(3)\n")
CHATTY = PYTHON_MODEL.replace(
    "    def execute(self, requests):",
    "    def initialize(self, args):\n        for i in range(50000):\n"
    "            print('x' * 100, flush=True)\n\n    def execute(self, requests):",
)

CASES = {
    "raising in initialize": (
        {"a/1/model.py": PYTHON_MODEL_RAISING},
        ["Model a failed to load"],
        "weights file is missing",
    ),
    "raising in execute": ({"a/1/model.py": RAISING_IN_EXECUTE}, ["golden cases failed", "boom in execute"], None),
    "returning a wrong data type": (
        {"a/1/model.py": WRONG_DTYPE},
        ["golden cases failed", "a/golden/basic.json"],
        None,
    ),
    "crashing the stub process": ({"a/1/model.py": CRASHING}, ["golden cases failed", "a/golden/basic.json"], None),
    "hanging in initialize past the load timeout": (
        {"a/1/model.py": SLEEPY_MODEL},
        ["did not become ready within --load-timeout 5 s"],
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_misbehaving_model_stops_the_release(ws, case):
    files, fragments, in_output = CASES[case]
    ws.write(files)
    ws.commit(case)
    before = ws.state()
    outcome = ws.release("--load-timeout", "5")
    assert_refused_cleanly(ws, before, outcome, 1, *fragments)
    assert outcome.report["steps"]["undo-bump"]["undone"] is True
    if in_output:
        assert in_output in outcome.out


def test_a_decoupled_model_sending_the_wrong_number_of_responses(ws):
    expected_two = {
        "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [3]}],
        "outputs": [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [i]}] for i in range(2)],
    }
    ws.write(
        {
            "counter/config.pbtxt": DECOUPLED_CONFIG,
            "counter/1/model.py": DECOUPLED_MODEL,
            "counter/golden/two.json": json.dumps(expected_two),
        }
    )
    ws.commit("a decoupled model")
    before = ws.state()
    assert_refused_cleanly(ws, before, ws.release(), 1, "expected 2 responses, got 3", "counter/golden/two.json")


def test_megabytes_of_model_log_do_not_flood_the_output(ws):
    ws.write({"a/1/model.py": CHATTY})
    ws.commit("a prints 5 MB at start-up")
    outcome = ws.release("--no-push")
    assert outcome.code == 0, outcome.out[-3000:]
    assert len(outcome.out) < 50_000


def test_a_cancelled_release_removes_the_server_undoes_the_bump_and_exits_143(ws):
    """GitHub cancels a run with SIGINT, then SIGTERM: here SIGTERM alone, during the test step of
    a release whose bumped model hangs in execute."""
    ws.write({"a/1/model.py": HANGING_MODEL})
    ws.commit("a: hangs")
    before = ws.state()
    report = ws.root.parent / "cancel-report.json"
    run = start(release_command(ws.image, "--report", str(report)), cwd=ws.root)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and run.poll() is None and not (ws.models / "a" / "2").exists():
        time.sleep(0.2)
    while (
        time.monotonic() < deadline
        and run.poll() is None
        and not ws.docker.containers.list(sparse=True, filters={"label": SERVERS})
    ):
        time.sleep(0.2)  # bumped and building: wait for the server of the test step
    assert run.poll() is None, run.communicate()[0][-3000:]
    time.sleep(2)  # the server loads the hanging model; the case is then sent
    started = time.monotonic()
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 143, out[-3000:]
    assert time.monotonic() - started < 30
    assert read_report(report)["error"]["exit_code"] == 143
    after = ws.state()
    assert after.tags == before.tags and after.status == before.status and after.files == before.files
    assert not ws.docker.containers.list(all=True, filters={"label": SERVERS})


SLOW_EXECUTE = PYTHON_MODEL.replace(
    "        responses = []\n", "        import time\n        time.sleep(30)\n        responses = []\n"
)


def test_a_server_the_daemon_kills_during_a_case_is_an_infrastructure_failure(ws):
    """`docker kill` (or the OOM killer) takes the server down while a golden case waits: exit 3
    saying the server was killed, not "fix the model or the golden file"; nothing half-done."""
    ws.write({"a/1/model.py": SLOW_EXECUTE})
    ws.commit("a: slow")
    before = ws.state()
    report = ws.root.parent / "report.json"
    report.unlink(missing_ok=True)
    process = start(release_command(ws.image, "--load-timeout", "30", "--report", str(report)), cwd=ws.root)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("golden cases:") or line.startswith("load:") and "ready in" in line:
            time.sleep(1.0)  # the case is in flight: the model sleeps in execute
            for container in ws.docker.containers.list(sparse=True, filters={"label": SERVERS}):
                container.kill()
            break
    lines += process.stdout.read().splitlines(keepends=True)
    code = process.wait(timeout=120)
    out = "".join(lines)
    assert code == 3, out[-3000:]
    message = read_report(report)["error"]["message"]
    assert "was killed while its golden cases ran" in message and "Fix the model" not in message, message
    after = ws.state()
    assert after.tags == before.tags and after.status == before.status and after.files == before.files
    assert not ws.docker.containers.list(all=True, filters={"label": SERVERS})


def test_a_closed_stdout_after_the_changes_drops_the_output_and_the_release_goes_on(ws, tmp_path):
    """`release --no-push | grep -m1 "changed: done"`: the reader goes away before the bump is shown.
    The release goes on with its output dropped and ends as it would have: built and tested, its
    bump undone (--no-push), exit 0, its report written, no container, no traceback."""
    ws.write({"a/1/model.py": PYTHON_MODEL + "\n# a change\n"})
    ws.commit("a: a change")
    before = ws.state()
    report = tmp_path / "closed-report.json"  # outside the checkout, whose state is compared
    process = subprocess.Popen(
        [*release_command(ws.image, "--no-push"), "--report", str(report)],
        cwd=ws.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in process.stdout:
        if line.startswith("changed: done"):
            break
    process.stdout.close()  # the reader is gone
    errors = process.stderr.read()
    assert process.wait(timeout=600) == 0, errors[-3000:]
    assert "Traceback" not in errors and "this is a bug" not in errors.lower(), errors[-3000:]
    assert "interrupted" not in errors
    found = json.loads(report.read_text())
    assert found["ok"] is True and found["steps"]["test"]["ok"] is True and found["released"] is False
    after = ws.state()
    assert after.status == before.status and after.files == before.files and after.tags == before.tags
    assert not ws.docker.containers.list(all=True, filters={"label": SERVERS})
