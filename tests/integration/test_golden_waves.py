"""Golden tests in waves on a real tritonserver: more models than max_loaded are loaded a few at a
time in one server, an ensemble with its steps, and a model failing to load in a later wave
stops the run with its name."""

from __future__ import annotations

import io
import json
import re
import shutil
import threading
import time
import xml.etree.ElementTree as ElementTree

import pytest

from support.models import (
    PYTHON_MODEL_RAISING,
    golden_case,
    pipeline_files,
    python_config,
    python_model_files,
    write_tree,
)
from support.stack import SERVERS
from triton_release import steps
from triton_release.console import Console
from triton_release.errors import Refused
from triton_release.models.repository import Repository
from triton_release.server.container import TritonServer
from triton_release.session import Session
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration

PASSING = ["a", "b", "c", "d", "pipe", "s1", "s2"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """Add-one models a b c d s1 s2, the ensemble pipe (s1 then s2), and broken, which fails to load."""
    files: dict = {
        **pipeline_files("pipe", "s1", "s2"),
        "broken/config.pbtxt": python_config("broken"),
        "broken/1/model.py": PYTHON_MODEL_RAISING,
        "broken/golden/basic.json": golden_case(),
    }
    for name in ("a", "b", "c", "d", "s1", "s2"):
        files.update(python_model_files(name))
    return Repository.load(write_tree(tmp_path_factory.mktemp("waves") / "model_repository", files))


def servers(docker_client) -> set[str]:
    return {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})}


def test_seven_models_in_waves_of_two_all_pass_the_ensemble_with_its_steps(docker_client, repo, image, tmp_path):
    junit = tmp_path / "golden.xml"
    run = steps.test(
        repo, image, PASSING, server_options=ServerOptions(load_timeout=60, max_loaded=2), junitxml=str(junit)
    )
    assert run.passed and sorted(c.case for c in run.cases) == sorted(f"{m}/basic" for m in PASSING)
    assert [w.loaded for w in run.waves] == [("a", "b"), ("c", "d"), ("pipe", "s1", "s2")]
    assert [w.tested for w in run.waves] == [("a", "b"), ("c", "d"), ("pipe", "s1", "s2")]
    assert [w.cases for w in run.waves] == [2, 2, 3] and [w.oversized for w in run.waves] == [False, False, True]
    assert all(w.seconds > 0 for w in run.waves)
    assert isinstance(run.peak_memory_bytes, int) and run.peak_memory_bytes > 0
    report = run.to_json()
    assert len(report["waves"]) == 3 and report["peak_memory_bytes"] == run.peak_memory_bytes
    suite = ElementTree.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "7" and suite.get("failures") == "0"  # one file for every wave


def test_a_multi_wave_run_shows_models_ready_and_cases_as_plain_lines_in_actions(repo, image):
    out = io.StringIO()
    session = Session("test", Console(ci=True, out=out, err=out))
    run = session.step(
        "test", None, steps.test, repo, image, PASSING, server_options=ServerOptions(load_timeout=60, max_loaded=2)
    )
    assert run.passed and len(run.waves) == 3
    lines = out.getvalue().splitlines()
    assert not any("\r" in line for line in lines)  # plain lines, never a redrawn bar
    loads = [line for line in lines if line.startswith("load: ")]
    waves = [int(re.search(r", wave (\d) of 3$", line).group(1)) for line in loads]  # every load shows its wave
    assert set(waves) == {1, 2, 3} and waves == sorted(waves)
    for wave, count in ((1, 2), (2, 2), (3, 3)):  # a b, then c d, then pipe s1 s2: each ends all ready
        last = [line for line in loads if line.endswith(f", wave {wave} of 3")][-1]
        assert re.fullmatch(rf"load: {count} of {count} models ready in [0-9.]+ s, wave {wave} of 3", last), last
    cases = [line for line in lines if line.startswith("golden cases: ")]
    assert re.fullmatch(r"golden cases: \d of 7 cases, wave 1 of 3", cases[0]), cases[0]
    assert re.fullmatch(r"golden cases: 7 of 7 cases in [0-9.]+ s, wave 3 of 3", cases[-1]), cases[-1]
    assert lines.index(cases[-1]) > lines.index(loads[-1])  # the cases' task spans the waves' loads


def test_a_model_failing_to_load_in_wave_two_is_refused_by_name(docker_client, repo, image):
    before = servers(docker_client)
    start = time.monotonic()
    with pytest.raises(Refused) as refused:
        steps.test(repo, image, ["a", "b", "broken", "c"], server_options=ServerOptions(load_timeout=300, max_loaded=2))
    assert "Model broken failed to load" in refused.value.message
    assert any("weights file is missing" in line for line in refused.value.details)
    assert time.monotonic() - start < 120  # at its failure, not at --load-timeout
    assert servers(docker_client) - before == set()


def test_a_switch_unloads_the_wave_before_and_keeps_a_model_both_need(docker_client, image):
    with TritonServer(image, {"a": 1, "s1": 1}, load_timeout=60, client=docker_client) as server:
        server.switch_to({"s1": 1, "b": 1})
        states = {s.name: s.state for s in server.index()}
        assert (states["a"], states["s1"], states["b"]) == ("UNAVAILABLE", "READY", "READY")
        assert server.loaded == {"s1": 1, "b": 1}
        assert server.logs().count("successfully loaded 's1'") == 1  # kept, not loaded again


def test_record_fills_outputs_in_waves_too(image, repo, tmp_path):
    root = tmp_path / "model_repository"
    for model in ("a", "c", "pipe", "s1", "s2"):
        shutil.copytree(repo.root / model, root / model)
    for model in ("a", "c", "pipe"):
        case = root / model / "golden" / "basic.json"
        case.write_text(json.dumps({"inputs": json.loads(case.read_text())["inputs"]}))
    recorded = steps.record(
        root, image, ["a", "c", "pipe"], server_options=ServerOptions(load_timeout=60, max_loaded=1)
    )
    assert len(recorded.written) == 3
    assert json.loads((root / "pipe" / "golden" / "basic.json").read_text())["outputs"][0]["data"] == [3, 4, 5, 6]
    assert json.loads((root / "c" / "golden" / "basic.json").read_text())["outputs"][0]["data"] == [2, 3, 4, 5]


@pytest.fixture
def beside(monkeypatch):
    """What decided each next wave's place (memory.room_beside: its figures and answer) and which
    loads ran beside a wave's cases (in the next wave's own thread), on the real server."""
    from triton_release.server import memory
    from triton_release.server.container import TritonServer

    seen: dict[str, list] = {"room": [], "loads": []}
    room_beside, load = memory.room_beside, TritonServer.load

    def deciding(peak, memory_limit, pids, pids_limit, loaded, wanted):
        answer = room_beside(peak, memory_limit, pids, pids_limit, loaded, wanted)
        seen["room"].append((peak, memory_limit, pids, pids_limit, loaded, wanted, answer))
        return answer

    def loading(self, models, *, sample=True):
        if threading.current_thread().name == "triton-next-wave":
            seen["loads"].append(tuple(sorted(models)))
        return load(self, models, sample=sample)

    monkeypatch.setattr(memory, "room_beside", deciding)
    monkeypatch.setattr(TritonServer, "load", loading)
    return seen


def test_the_next_wave_loads_beside_the_cases_within_the_container_s_memory_and_pids(
    docker_client, repo, image, beside
):
    before = servers(docker_client)
    run = steps.test(repo, image, PASSING, server_options=ServerOptions(load_timeout=60, max_loaded=2))
    assert run.passed and sorted(c.case for c in run.cases) == sorted(f"{m}/basic" for m in PASSING)
    assert [w.loaded for w in run.waves] == [("a", "b"), ("c", "d"), ("pipe", "s1", "s2")]
    assert beside["loads"] == [("c", "d"), ("pipe", "s1", "s2")]  # each beside the cases before it
    assert len(beside["room"]) == 2
    for peak, memory_limit, pids, pids_limit, loaded, wanted, answer in beside["room"]:  # the daemon's figures
        assert answer == wanted and isinstance(pids, int) and pids > 0 and pids_limit == 4096
        assert 4 * peak <= memory_limit and pids + answer * -(-pids // loaded) <= 0.75 * pids_limit
    assert servers(docker_client) - before == set()


def test_a_pids_limit_without_room_for_the_next_wave_loads_it_after_the_cases(docker_client, repo, image, beside):
    steps.test(repo, image, ["a", "b", "c", "d"], server_options=ServerOptions(load_timeout=60, max_loaded=2))
    pids = beside["room"][0][2]  # what wave 1 runs: 3/4 of a limit of 1.25x it leaves no room for another model
    beside["room"].clear()
    beside["loads"].clear()
    limit = pids + pids // 4
    run = steps.test(
        repo, image, ["a", "b", "c", "d"], server_options=ServerOptions(load_timeout=60, max_loaded=2, pids=limit)
    )
    assert run.passed and len(run.cases) == 4 and len(run.waves) == 2
    assert beside["loads"] == [] and [answer for *_, answer in beside["room"]] == [0]
    assert beside["room"][0][3] == limit
