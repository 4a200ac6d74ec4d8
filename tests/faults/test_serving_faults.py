"""Models that misbehave on a real tritonserver: hanging on either protocol, a decoupled model
that never sends its final flag, a log flood, a memory hog, a version_policy that hides the
newest version, and a cancel during a hung gRPC case. Each fails its case or its load with a
message; none takes the runner or a container down with it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import requests

from bench.peak import measured
from support.models import (
    FLOODING_MODEL,
    HANGING_MODEL,
    MEMORY_HOG_MODEL,
    NEVER_FINAL_MODEL,
    PYTHON_MODEL,
    case_file,
    decoupled_config,
    golden_case,
    python_config,
    write_tree,
)
from support.reports import read_report
from support.stack import ROOT, SERVERS
from support.tool import start, tool_command
from triton_release.errors import Refused
from triton_release.models import inference
from triton_release.models.repository import Repository
from triton_release.server.container import TritonServer, memory_limit

pytestmark = pytest.mark.integration

FLOOD_MB = 200
NEVER_FINAL_CASE = json.dumps(
    {
        "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [1]}],
        "outputs": [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [0]}]],
    }
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving-faults") / "model_repository"
    write_tree(
        root,
        {
            "stuck/config.pbtxt": python_config("stuck"),
            "stuck/1/model.py": HANGING_MODEL,
            "stuck/golden/grpc.json": golden_case(protocol="grpc"),
            "neverfinal/config.pbtxt": decoupled_config("neverfinal"),
            "neverfinal/1/model.py": NEVER_FINAL_MODEL,
            "neverfinal/golden/one.json": NEVER_FINAL_CASE,
            "flood/config.pbtxt": python_config("flood"),
            "flood/1/model.py": FLOODING_MODEL.format(megabytes=FLOOD_MB),
            "hog/config.pbtxt": python_config("hog"),
            "hog/1/model.py": MEMORY_HOG_MODEL,
            "pinned/config.pbtxt": python_config("pinned") + "version_policy: { specific: { versions: [ 1 ] } }\n",
            "pinned/1/model.py": PYTHON_MODEL,
            "pinned/2/model.py": PYTHON_MODEL,
        },
    )
    return Repository.load(root)


@pytest.fixture(scope="module")
def server(docker_client, image):
    with TritonServer(image, {"stuck": 1, "neverfinal": 1}, load_timeout=120, client=docker_client) as running:
        yield running


def servers(docker_client, image: str) -> set[str]:
    """This module's server containers (other tests may run servers at the same time)."""
    return {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS, "ancestor": image})}


# -- 1. every case has a deadline, on every protocol ----------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_hanging_model_fails_its_case_at_the_case_timeout(server, tmp_path, protocol):
    case = case_file(tmp_path, "stuck", golden_case(protocol=protocol, timeout=3))
    start = time.monotonic()
    result = inference.run_case(case, server.http_url, server.grpc_url)
    assert time.monotonic() - start < 30  # the model sleeps 600 s
    assert not result.passed
    assert "case stuck/stuck-case got no answer within 3 s" in result.message, result.message


def test_a_decoupled_model_that_never_sends_its_final_flag_ends_at_the_deadline(server, tmp_path):
    case = case_file(tmp_path, "neverfinal", json.dumps({**json.loads(NEVER_FINAL_CASE), "timeout": 3}))
    start = time.monotonic()
    result = inference.run_case(case, server.http_url, server.grpc_url, decoupled=True)
    assert time.monotonic() - start < 30  # neither the wait nor stop_stream hangs
    assert not result.passed
    assert "case neverfinal/neverfinal-case got no final response (after 1 response(s)) within 3 s" in result.message


# -- 7. the server's memory and processes are limited --------------------------------------------


def test_the_server_runs_with_memory_and_process_limits(server):
    server.container.reload()
    host = server.container.attrs["HostConfig"]
    assert host["Memory"] == memory_limit(None) and host["PidsLimit"] == 4096
    assert host["LogConfig"]["Config"]["max-size"]


def test_a_model_eating_memory_fails_its_case_not_the_runner(docker_client, image, tmp_path):
    with TritonServer(image, {"hog": 1}, load_timeout=120, memory="1g", pids=512, client=docker_client) as hog:
        hog.container.reload()
        assert hog.container.attrs["HostConfig"]["Memory"] == 1 << 30
        assert hog.container.attrs["HostConfig"]["PidsLimit"] == 512
        case = case_file(tmp_path, "hog", golden_case(timeout=120))
        result = inference.run_case(case, hog.http_url, hog.grpc_url)
        assert not result.passed and "Hint: the model's Python process died" in result.message, result.message
        name = hog.name
    assert not docker_client.containers.list(all=True, filters={"name": name})


# -- 6. a log flood costs the tool nothing -------------------------------------------------------

FLOOD_SCRIPT = """
import docker, json, sys
from triton_release.errors import Refused
from triton_release.server.container import TritonServer
try:
    with TritonServer(sys.argv[1], {"flood": 1}, load_timeout=300, client=docker.from_env(timeout=600)):
        pass
except Refused as exc:
    print(json.dumps({"message": str(exc), "details": exc.details}))
"""


def test_a_model_flooding_the_log_keeps_the_tool_small_and_its_message_useful(image):
    """200 MB of log lines during initialize: the tool reads only a bounded tail of them. Its peak
    memory is measured from a small launcher: spawned from this test's worker, it would start
    with the worker's own largest size (Linux keeps it across exec; 151 MB read once so)."""
    _, code, out, peak = measured([sys.executable, "-c", FLOOD_SCRIPT, image], ROOT, dict(os.environ))
    text = out.decode(errors="replace")
    assert code == 0, text
    refused = json.loads(text.strip().splitlines()[-1])  # the script's last line, after any warning
    assert "Model flood failed to load" in refused["message"]
    assert any("flooded the log, then failed" in line for line in refused["details"])
    assert sum(map(len, refused["details"])) < 100_000
    assert 0 < peak < 150 * 1024 * 1024, f"the tool grew to {peak >> 20} MB"


# -- 8. a version_policy that hides the version awaited ------------------------------------------


def test_a_version_policy_excluding_the_awaited_version_fails_at_once(docker_client, image):
    start = time.monotonic()
    pinned = TritonServer(image, {"pinned": 2}, load_timeout=300, client=docker_client)
    with pytest.raises(Refused) as refused, pinned:
        pass
    assert time.monotonic() - start < 120  # not the 300 s load timeout
    message = str(refused.value)
    assert "Model pinned is ready" in message and "version 1 only, not version 2" in message
    assert 'version_policy {"specific": {"versions": [1]}}' in message
    assert not docker_client.containers.list(all=True, filters={"name": pinned.name})


# -- 9. a cancel during a hung gRPC case or stream -----------------------------------------------


def wait_until_served(docker_client, image: str, before: set[str], model: str, run: subprocess.Popen) -> bool:
    """Whether a new server of `image`, started by `run`, serves `model` within 120 s."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        for container in docker_client.containers.list(filters={"label": SERVERS, "ancestor": image}):
            ports = container.attrs["NetworkSettings"]["Ports"].get("8000/tcp") or []
            if container.id in before or not ports:
                continue
            try:
                url = f"http://127.0.0.1:{ports[0]['HostPort']}/v2/models/{model}/ready"
                if requests.get(url, timeout=1).status_code == 200:
                    return True
            except requests.RequestException:
                pass
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("model", ["stuck", "neverfinal"])  # a gRPC call; a stream without its final flag
def test_sigint_during_a_hung_grpc_case_exits_130_at_once_and_removes_the_server(
    docker_client, repo, image, tmp_path, model
):
    root = tmp_path / "model_repository"
    shutil.copytree(repo.root / model, root / model)
    before = servers(docker_client, image)
    report = tmp_path / "report.json"
    run = start(
        tool_command(
            "test", "--image", image, "--model-repository", str(root), "--models", model, "--report", str(report)
        )
    )
    left: set[str] = set()
    try:
        assert wait_until_served(docker_client, image, before, model, run), "the server never became ready"
        time.sleep(2)  # the case is in flight, well within its 60 s deadline: the model never answers
        started = time.monotonic()
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=60)
        stopped = time.monotonic() - started
    finally:  # a run that did not stop is killed, and its server removed, whatever failed
        if run.poll() is None:
            run.kill()
            run.communicate()
        left = servers(docker_client, image) - before
        for leftover in left:
            docker_client.containers.get(leftover).remove(force=True)
    assert run.returncode == 130 and stopped < 20, out[-3000:]
    assert "Traceback" not in out and "could not run" not in out, out[-3000:]
    assert "interrupted by SIGINT" in out
    assert read_report(report)["error"]["exit_code"] == 130
    assert not left
