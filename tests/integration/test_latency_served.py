"""The latency gate on the real stack: perf_analyzer drives a model's new version beside the
version before it in the server that tested them, the release is refused only when the new one
is slower beyond --max-latency-increase (perf_analyzer installed on first use when it is not found),
and `warmup: golden` warms a model before it is ready.
Short windows and few rounds: these tests check behaviour, the bench measures the gate."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import docker
import pytest

from support.models import golden_case, python_config, write_tree
from support.stack import BASE_IMAGE, PERF_ANALYZER
from triton_release import cache, steps
from triton_release.models.devices import image_configs
from triton_release.models.gates import GateOptions
from triton_release.models.latency import LatencyOptions
from triton_release.models.repository import Repository
from triton_release.server.container import TritonServer
from triton_release.settings import ImageOptions, ServerOptions

pytestmark = [pytest.mark.integration, pytest.mark.serial]

SLEEPING_MODEL = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep({seconds})
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", (x + 1).astype(np.float32))]))
        return responses
"""
FAST = ["--latency-rounds", "3", "--latency-interval", "150", "--perf-analyzer", str(PERF_ANALYZER)]


@pytest.fixture(scope="module", autouse=True)
def perf_analyzer(stack):
    assert PERF_ANALYZER.exists(), f"{PERF_ANALYZER} is missing: `make stack` installs it (stack/stack.py)"


def sleeping(name: str, milliseconds: float, comment: str = "") -> dict[str, str]:
    return {
        f"{name}/config.pbtxt": python_config(name),
        f"{name}/1/model.py": comment + SLEEPING_MODEL.format(seconds=milliseconds / 1000),
        f"{name}/golden/basic.json": golden_case(),
    }


def without_perf_analyzer(fresh: Path, monkeypatch) -> Path:
    """TRITON_RELEASE_CACHE at `fresh`, which holds the run's cache (linked) but its tools/, and PATH
    without perf_analyzer."""
    kept = cache.configure(os.environ)
    fresh.mkdir()
    for entry in kept.iterdir() if kept.is_dir() else []:
        if entry.name != "tools":
            (fresh / entry.name).symlink_to(entry)
    monkeypatch.setenv("TRITON_RELEASE_CACHE", str(fresh))
    path = [part for part in os.environ["PATH"].split(":") if not (Path(part) / "perf_analyzer").exists()]
    monkeypatch.setenv("PATH", ":".join(path))
    return fresh


def test_a_version_sleeping_8_ms_where_the_last_slept_2_is_refused_and_a_comment_only_change_is_released(
    git_repo, releaser, tmp_path, monkeypatch
):
    git_repo.write(sleeping("a", 2))
    git_repo.commit("a sleeps 2 ms")
    first = releaser("--max-latency-increase", "0.5", *FAST)  # nothing to compare: a note, not a failure
    assert first["version"] == "1.0.0"
    latency = first["steps"]["test"]["latency"]
    assert latency["models"] == [] and "a first release" in latency["note"]
    tags = releaser.registry.tags()

    # a cache holding everything but perf_analyzer, and none on PATH: the bound installs it on first use
    git_repo.write(sleeping("a", 8))
    git_repo.commit("a sleeps 8 ms")
    fresh = without_perf_analyzer(tmp_path / "cache", monkeypatch)
    refused = releaser("--max-latency-increase", "0.5", *FAST[:4], code=1)
    installed = fresh / "tools" / "perf_analyzer-2.51.0"
    assert refused["steps"]["test"]["latency"]["perf_analyzer"]["path"] == str(installed / "bin" / "perf_analyzer")
    assert sorted(p.name for p in installed.rglob("*") if p.is_file()) == [
        ".complete",
        "libb64.so.0d",
        "libcudart.so.12",
        "perf_analyzer",
    ]
    monkeypatch.delenv("TRITON_RELEASE_CACHE")
    message = refused["error"]["message"]
    assert "Model a version 2 is slower than version 1 beyond max_latency_increase 0.5" in message, message
    assert "p50" in message and "ms against" in message and "infer/s" in message and "interval" in message
    assert refused["steps"]["test"]["passed"] is True and "push" not in refused["steps"]
    assert refused["steps"]["undo-bump"]["undone"] is True and releaser.registry.tags() == tags
    assert git_repo.git("status", "--porcelain") == ""
    [model] = refused["steps"]["test"]["latency"]["models"]
    assert (model["model"], model["from_version"], model["to_version"], model["verdict"]) == ("a", 1, 2, "refused")
    [compared] = model["comparisons"]
    assert compared["after"]["p50_us"] > 2 * compared["before"]["p50_us"] and compared["p50_ratio"]["low"] > 1.5
    # at most 3 rounds of each version, every one kept; stopped after 2 only by an interval beyond 1.5
    assert len([r for r in model["rounds"] if not r["warmup"]]) == 2 * compared["pairs"] and compared["pairs"] in (2, 3)
    assert (compared["early_stop"] is None) == (compared["pairs"] == 3)
    assert compared["early_stop"] is None or compared["early_stop"]["p50_ratio"]["low"] > 1.5
    assert [c["version"] for c in model["cold_start"]] == [1, 2] and all(c["load_s"] for c in model["cold_start"])

    # the same model with only a comment changed, through the action with the bound as a percentage
    git_repo.write(sleeping("a", 2, comment="# only a comment changed\n"))
    git_repo.commit("a: a comment")
    released, text = releaser.action(
        git_repo.root,
        {
            "INPUT_MAX-LATENCY-INCREASE": "50%",
            "INPUT_LATENCY-ROUNDS": "3",
            "PATH": f"{PERF_ANALYZER.parent}:{os.environ['PATH']}",
        },  # found on PATH, as in the action's image
    )
    assert released["version"] == "1.1.0" and "push" in released["steps"]
    latency = released["steps"]["test"]["latency"]
    assert latency["max_latency_increase"] == 0.5 and latency["rounds"] == 3
    [model] = latency["models"]
    assert model["verdict"] in ("pass", "inconclusive")  # never refused: the same code
    [compared] = model["comparisons"]
    assert compared["before"]["p50_us"] > 0 and compared["after"]["p50_us"] > 0 and compared["after"]["throughput"] > 0
    assert compared["p50_ratio"]["low"] <= compared["p50_ratio"]["ratio"] <= compared["p50_ratio"]["high"] < 1.5
    assert "**Latency** (perf_analyzer, at most 3 rounds per version, max-latency-increase 0.5)" in text, text
    assert "| `a` | 1 -> 2 | 1 |" in text and "cold start: load" in text


WARMING_MODEL = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        if self.calls == 1:
            time.sleep(1)  # a cold first request: what the warm-up takes before the model is ready
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", (x + 1).astype(np.float32))]))
        print(f"execute call {self.calls} done", flush=True)
        return responses
"""


def test_only_error_cases_are_not_gated_with_the_reason_and_warmup_golden_warms_the_model_before_it_is_ready(
    tmp_path, docker_client, image_tags
):
    inputs = json.loads(golden_case())["inputs"]
    files = {
        "errs/config.pbtxt": python_config("errs"),
        "errs/1/model.py": SLEEPING_MODEL.format(seconds=0),
        "errs/2/model.py": SLEEPING_MODEL.format(seconds=0),
        "errs/golden/refused.json": json.dumps({"inputs": [{**inputs[0], "name": "NOPE"}], "error": True}),
        "warm/config.pbtxt": python_config("warm"),
        "warm/1/model.py": WARMING_MODEL,
        "warm/2/model.py": WARMING_MODEL,
        "warm/golden/basic.json": golden_case(),
    }
    repo = Repository.load(write_tree(tmp_path / "model_repository", files))
    user_config = (repo.root / "warm" / "config.pbtxt").read_text()
    tag = f"triton-release-test/latency:{tmp_path.name[-12:].lower().strip('_')}"
    image_tags.append(tag)
    built = steps.build(repo, ImageOptions(BASE_IMAGE, warmup="golden"), tag)
    assert built.warmup.written == (("warm", ("basic",)),) and "expects an error" in dict(built.warmup.left_out)["errs"]
    assert (repo.root / "warm" / "config.pbtxt").read_text() == user_config  # the user's file is untouched
    [warmup] = image_configs(docker_client, tag, ["warm"])["warm"].model_warmup
    assert warmup.name == "golden basic" and warmup.inputs["INPUT0"].input_data_file

    with TritonServer(tag, {"warm": 2}, load_timeout=60, client=docker_client) as server:
        logs = server.logs()  # ready, and not one request sent: the only call is the warm-up's, done before
        assert "execute call 1 done" in logs, logs[-2000:]
        assert "execute call 2" not in logs

    options = LatencyOptions(
        max_increase=4.0, rounds=2, interval_ms=150, perf_analyzer=str(PERF_ANALYZER), env=dict(os.environ)
    )
    run = steps.test(
        repo,
        tag,
        ["errs", "warm"],
        server_options=ServerOptions(load_timeout=60),
        new_versions=("errs", "warm"),
        gates=GateOptions(latency=options),
    )
    # the pair was loaded with the image's config, warm-up included: the golden case was not the cold call
    [basic] = [c for c in run.cases if c.case == "warm/basic"]
    assert basic.passed and basic.latency_ms < 900, basic
    found = {m.model: m for m in run.latency.models}
    assert found["errs"].verdict == "not gated"  # listed, never refused: latency_unmeasured is allow
    assert found["errs"].note == "no golden case sends a request it can replay (errs/refused: it expects an error)"
    assert run.latency.to_json()["not_gated"] == [{"model": "errs", "because": found["errs"].note}]
    assert found["warm"].measured and found["warm"].verdict in ("pass", "inconclusive")
    # warmed at load: the first request after a cold load is not the model's 1 s cold call
    assert all(c.first_request_ms is not None and c.first_request_ms < 900 for c in found["warm"].cold_start)


def test_warmup_golden_loads_a_model_whose_golden_case_name_holds_quotes_and_a_backslash(
    tmp_path, docker_client, image_tags
):
    case = 'say "hi" \\ there'
    files = {
        "warm/config.pbtxt": python_config("warm"),
        "warm/1/model.py": WARMING_MODEL,
        f"warm/golden/{case}.json": golden_case(),
    }
    repo = Repository.load(write_tree(tmp_path / "model_repository", files))
    tag = f"triton-release-test/warmup-names:{tmp_path.name[-12:].lower().strip('_')}"
    image_tags.append(tag)
    built = steps.build(repo, ImageOptions(BASE_IMAGE, warmup="golden"), tag)
    assert built.warmup.written == (("warm", (case,)),)
    [warmup] = image_configs(docker_client, tag, ["warm"])["warm"].model_warmup
    assert warmup.name == f"golden {case}"

    with TritonServer(tag, {"warm": 1}, load_timeout=60, client=docker_client) as server:
        logs = server.logs()  # ready: Triton parsed the config and ran the warm-up under that name
        assert "execute call 1 done" in logs, logs[-2000:]


def test_a_shard_of_a_staged_candidate_measures_its_models_and_the_gate_fails_its_record_and_the_promote(
    git_repo, releaser, docker_client, cli_report
):
    from triton_release.registry.candidate.shard_results import read_shard_result

    git_repo.write(sleeping("a", 2))
    git_repo.commit("a sleeps 2 ms")
    releaser()  # 1.0.0: the version the candidate's new one is measured against
    git_repo.write(sleeping("a", 8))
    git_repo.commit("a sleeps 8 ms")

    run = cli_report

    staged = run("stage", "--to", releaser.target, "--base-image", BASE_IMAGE)
    candidate = staged["candidate"]
    try:
        refused = run(
            "test", "--image", candidate, "--shard", "shard-1", "--max-latency-increase", "0.5", *FAST, code=1
        )
        assert "Model a version 2 is slower than version 1" in refused["error"]["message"]
        [model] = refused["steps"]["test"]["latency"]["models"]
        assert model["verdict"] == "refused"
        record = read_shard_result(releaser.registry, candidate.split("@", 1)[1], "shard-1")
        assert not record.passed and record.failed_cases == []
        assert record.reason.startswith("Model a version 2 is slower than version 1 beyond max_latency_increase 0.5")
        promoted = run("promote", "--candidate", candidate, "--version", staged["version"], code=1)
        assert "shard-1 failed: Model a version 2 is slower than version 1" in promoted["error"]["message"]
        assert "1.1.0" not in releaser.registry.tags()
    finally:  # the candidate as pulled by digest; the releaser removes its local tag
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(candidate, force=True)
