"""Golden tests on a real tritonserver: tolerances, decoupled streams, load failures, the pytest
plugin on its own, the tool inside a container, and `record`."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time

import pytest

from support.models import (
    DECOUPLED_CONFIG,
    DECOUPLED_MODEL,
    PYTHON_MODEL,
    SLEEPY_MODEL,
    case_file,
    golden_case,
    python_config,
    write_tree,
)
from support.reports import read_report
from support.stack import BASE_IMAGE, SERVERS
from support.tool import start, tool_command
from triton_release.cli.main import main
from triton_release.errors import Refused
from triton_release.image.build import build_image
from triton_release.models import golden, inference
from triton_release.models.repository import Repository
from triton_release.server.container import TritonServer

pytestmark = pytest.mark.integration


def counter_case(count: int, responses: int) -> str:
    return json.dumps(
        {
            "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [count]}],
            "outputs": [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [i]}] for i in range(responses)],
        }
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden") / "model_repository"
    write_tree(
        root,
        {
            "addone/config.pbtxt": python_config("addone"),
            "addone/1/model.py": PYTHON_MODEL,
            "addone/golden/basic.json": golden_case(),
            "addone/golden/batch3.json": golden_case(shape=(3, 4), data=range(12), out=range(1, 13)),
            "counter/config.pbtxt": DECOUPLED_CONFIG,
            "counter/1/model.py": DECOUPLED_MODEL,
            "counter/golden/three.json": counter_case(3, 3),
            "sleepy/config.pbtxt": python_config("sleepy"),
            "sleepy/1/model.py": SLEEPY_MODEL,
        },
    )
    return Repository.load(root)


@pytest.fixture(scope="module")
def server(docker_client, image):
    with TritonServer(image, {"addone": 1, "counter": 1}, load_timeout=60, client=docker_client) as running:
        yield running


@pytest.mark.parametrize(("atol", "passes"), [(2e-5, True), (5e-6, False)])
def test_tolerance_just_inside_passes_and_just_outside_fails(server, tmp_path, atol, passes):
    case = case_file(tmp_path, "addone", golden_case(out=(2, 3, 4, 5.00001), atol=atol, rtol=0))
    result = inference.run_case(case, server.http_url, server.grpc_url)
    assert result.passed is passes, result.message
    assert result.outputs[0].max_abs_diff == pytest.approx(1e-5, rel=0.05)
    if not passes:
        assert "worst at [0, 3]" in result.message and f"atol={atol:g}" in result.message


def test_grpc_protocol_case_passes(server, tmp_path):
    case = case_file(tmp_path, "addone", golden_case(protocol="grpc"))
    assert inference.run_case(case, server.http_url, server.grpc_url).passed


def test_decoupled_model_three_responses_compared_in_order(server, repo):
    case, _ = golden.load_case(repo["counter"].golden_cases[0], "counter")
    result = inference.run_case(case, server.http_url, server.grpc_url, decoupled=True)
    assert result.passed, result.message
    assert [o.name for o in result.outputs] == ["OUT", "OUT", "OUT"]


def test_decoupled_case_expecting_two_responses_fails_with_both_counts(server, tmp_path):
    case = case_file(tmp_path, "counter", counter_case(3, 2))
    result = inference.run_case(case, server.http_url, server.grpc_url, decoupled=True)
    assert not result.passed and result.message == "expected 2 responses, got 3"


def test_decoupled_case_of_no_response_passes_on_none_and_fails_on_one(server, tmp_path):
    """`"outputs": []` for a decoupled model is a list of zero responses: exactly none (NVIDIA's QA
    asserts this of some decoupled models); only a missing "outputs" is not compared."""
    none = case_file(tmp_path / "none", "counter", counter_case(0, 0))
    result = inference.run_case(none, server.http_url, server.grpc_url, decoupled=True)
    assert result.passed, result.message
    one = case_file(tmp_path / "one", "counter", counter_case(1, 0))
    result = inference.run_case(one, server.http_url, server.grpc_url, decoupled=True)
    assert not result.passed and 'expected no response ("outputs": [] for a decoupled model), got 1' in result.message


def test_decoupled_response_with_a_wrong_value_names_the_response(server, tmp_path):
    raw = json.loads(counter_case(3, 3))
    raw["outputs"][1][0]["data"] = [7]
    case = case_file(tmp_path, "counter", json.dumps(raw))
    result = inference.run_case(case, server.http_url, server.grpc_url, decoupled=True)
    assert not result.passed and result.message.startswith("response 2: output 'OUT'")


def test_the_plugin_runs_on_its_own_against_a_running_server(server, repo, tmp_path):
    def plugin(*args: str) -> subprocess.CompletedProcess:
        """pytest with the plugin, against `server` and the repository's cases."""
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--triton-url",
                server.http_url,
                "--triton-grpc-url",
                server.grpc_url,
                "--model-repository",
                str(repo.root),
                *args,
                "-p",
                "no:cacheprovider",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )

    junit = tmp_path / "golden.xml"
    done = plugin("--triton-models", "addone,counter", "--junitxml", str(junit), "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("addone/basic", "addone/batch3", "counter/three"):
        assert f"::{name} PASSED" in done.stdout
    xml = junit.read_text()
    assert 'tests="3"' in xml and 'name="latency_ms"' in xml
    only = plugin("-k", "batch3", "-q")
    assert only.returncode == 0 and "1 passed" in only.stdout, only.stdout


def test_a_model_hanging_in_initialize_fails_at_the_load_timeout(docker_client, image):
    start = time.monotonic()
    sleepy = TritonServer(image, {"sleepy": 1}, load_timeout=5, client=docker_client)
    with pytest.raises(Refused) as refused, sleepy:
        pass
    assert "Model sleepy did not become ready within --load-timeout 5 s" in str(refused.value)
    assert time.monotonic() - start < 60  # not the 600 s the model sleeps
    assert not docker_client.containers.list(all=True, filters={"name": sleepy.name})


def test_a_stub_without_its_libpython_fails_fast_with_the_servers_line(docker_client, repo, unique, image_tags):
    tag = f"triton-release-test/stub38-plain:{unique}"
    image_tags.append(tag)
    build_image(repo, "local/tritonserver:24.10-py3-stub38", tag, models=["addone"], client=docker_client)
    mismatched = TritonServer(tag, {"addone": 1}, load_timeout=300, client=docker_client)
    with pytest.raises(Refused) as refused, mismatched:
        pass
    assert "stub cannot start" in str(refused.value)
    assert any("libpython3.8.so.1.0: cannot open shared object file" in line for line in refused.value.details)
    assert not docker_client.containers.list(all=True, filters={"name": mismatched.name})


def test_the_tool_inside_a_container_reaches_the_server(docker_client, tool_image, image, repo, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(repo.root, work / "model_repository")
    servers = {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})}
    output = docker_client.containers.run(
        tool_image,
        ["test", "--image", image, "--models", "addone,counter"],
        remove=True,
        working_dir="/work",
        volumes={
            "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
            str(work): {"bind": "/work", "mode": "rw"},
        },
        stdout=True,
        stderr=True,
    )
    text = output.decode()
    assert "PASS counter/three" in text and "3 golden cases passed" in text, text
    assert {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})} == servers


def test_record_fills_outputs_that_then_pass(image, repo, tmp_path, capsys):
    root = tmp_path / "model_repository"
    shutil.copytree(repo.root, root)
    case = root / "addone" / "golden" / "new.json"
    case.write_text(
        json.dumps(
            {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 4], "data": [0, 1, 2, 3, 4, 5, 6, 7]}]}
        )
    )
    kept = (root / "addone" / "golden" / "basic.json").read_text()
    assert main(["record", "--image", image, "--model-repository", str(root), "--models", "addone,counter"]) == 0
    recorded = json.loads(case.read_text())
    assert recorded["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [2, 4], "data": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]}
    ]
    assert (root / "addone" / "golden" / "basic.json").read_text() == kept  # never overwritten
    assert main(["test", "--image", image, "--model-repository", str(root), "--models", "addone"]) == 0
    assert "3 golden cases passed" in capsys.readouterr().out


STUCK_MODEL = """\
import time


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(600)
        return []
"""


def test_a_cancel_during_a_hung_case_removes_the_server_and_writes_the_report(
    docker_client, tmp_path, unique, image_tags
):
    """GitHub cancels with SIGINT, then SIGTERM: the first stops the run, the second must not
    break its cleanup; exit 130, the report written, no container left."""
    import os
    import signal

    import requests

    root = write_tree(
        tmp_path / "model_repository",
        {
            "stuck/config.pbtxt": python_config("stuck"),
            "stuck/1/model.py": STUCK_MODEL,
            "stuck/golden/basic.json": golden_case(),
        },
    )
    tag = f"triton-release-test/stuck:{unique}"
    image_tags.append(tag)
    build_image(Repository.load(root), BASE_IMAGE, tag, client=docker_client)
    before = {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})}
    report = tmp_path / "report.json"
    run = start(tool_command("test", "--image", tag, "--model-repository", str(root), "--report", str(report)))
    deadline = time.monotonic() + 120
    ready = False
    while not ready and time.monotonic() < deadline and run.poll() is None:
        for container in docker_client.containers.list(filters={"label": SERVERS}):
            if container.id in before:
                continue
            ports = container.attrs["NetworkSettings"]["Ports"].get("8000/tcp") or []
            with contextlib.suppress(requests.RequestException):
                ready = (
                    bool(ports)
                    and requests.get(
                        f"http://127.0.0.1:{ports[0]['HostPort']}/v2/models/stuck/ready", timeout=1
                    ).status_code
                    == 200
                )
        time.sleep(0.2)
    assert ready, "the server never became ready"
    time.sleep(1)  # the case is being sent: the model sleeps in execute
    started = time.monotonic()
    run.send_signal(signal.SIGINT)
    time.sleep(1)
    if run.poll() is None:
        run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=60)
    assert run.returncode == 130, out[-3000:]
    assert time.monotonic() - started < 30
    assert "Traceback" not in out, out[-3000:]
    assert read_report(report)["error"]["exit_code"] == 130
    left = {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})} - before
    assert not left
    assert os.path.exists(report)


def test_a_bad_k_expression_is_a_usage_error(image, repo, cli_report):
    found = cli_report(
        "test", "--image", image, "--model-repository", str(repo.root), "--models", "addone", "-k", "and (", code=2
    )
    assert "-k" in found["error"]["message"]


def test_an_image_is_tested_at_the_versions_it_holds_not_the_working_trees(docker_client, tmp_path, unique, image_tags):
    """An older image against a newer working tree: the versions come from the image's label, so
    the server is not asked to wait for a version folder the image does not have."""
    from triton_release import steps
    from triton_release.settings import ServerOptions

    root = write_tree(
        tmp_path / "model_repository",
        {
            "addone/config.pbtxt": python_config("addone"),
            "addone/1/model.py": PYTHON_MODEL,
            "addone/golden/basic.json": golden_case(),
        },
    )
    tag = f"triton-release-test/older:{unique}"
    image_tags.append(tag)
    build_image(
        Repository.load(root),
        BASE_IMAGE,
        tag,
        {"triton-release.models": json.dumps({"addone": [1]})},
        client=docker_client,
    )
    write_tree(root, {"addone/2/model.py": PYTHON_MODEL})  # the working tree moved on
    run = steps.test(root, tag, ["addone"], server_options=ServerOptions(load_timeout=60))
    assert run.passed and run.cases[0].case == "addone/basic" and run.loaded == ("addone",)
