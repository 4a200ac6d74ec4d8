"""The latency gate fails closed on the real stack: a new version whose stub dies or hangs under
perf_analyzer's load is a regression (refused with --max-latency-increase, a loud warning
without), a model the gate leaves out is listed as not gated (and refused with
`latency_unmeasured: refuse`), and every bundled example and every plain model of real-world
shapes (BYTES of two lengths, batching, not batching, two instances) is measured. One image for the
module; one round per version, short windows: these tests check behaviour, not speed."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from support.models import DECOUPLED_MODEL, decoupled_config, golden_case, python_config, write_tree
from support.stack import BASE_IMAGE, PERF_ANALYZER, ROOT
from triton_release import steps
from triton_release.errors import Refused
from triton_release.models.gates import GateOptions
from triton_release.models.latency import LatencyOptions
from triton_release.models.repository import Repository
from triton_release.settings import ImageOptions, ServerOptions

pytestmark = pytest.mark.integration

# The add-one model, and after `after` calls of execute: `action` (os._exit: the stub dies; a long
# sleep: it hangs). Golden cases and drift send it far fewer requests; perf_analyzer's round, more.
UNDER_LOAD_MODEL = """\
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        if self.calls > {after}:
            {action}
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", (x + 1).astype(np.float32))]))
        return responses
"""
CRASH = "os._exit(1)"
HANG = "time.sleep(120)"

UPPER_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            upper = np.array([t.decode().upper().encode() for t in text.reshape(-1)], dtype=object).reshape(text.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("UPPER", upper)]))
        return responses
"""
BYTES_CONFIG = """\
name: "bytes"
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


def bytes_case(words: list[str]) -> str:
    tensor = {"datatype": "BYTES", "shape": [len(words)]}
    return json.dumps(
        {
            "inputs": [{"name": "TEXT", **tensor, "data": words}],
            "outputs": [{"name": "UPPER", **tensor, "data": [w.upper() for w in words]}],
        }
    )


def add_one(name: str, model: str, config: str, cases: dict[str, str]) -> dict[str, str]:
    files = {f"{name}/config.pbtxt": config, f"{name}/1/model.py": UNDER_LOAD_MODEL.format(after=10**9, action="pass")}
    files[f"{name}/2/model.py"] = model
    files.update({f"{name}/golden/{case}.json": text for case, text in cases.items()})
    return files


PLAIN = UNDER_LOAD_MODEL.format(after=10**9, action="pass")
EXAMPLES = ("add_sub", "pipeline", "preprocess", "score", "text_upper")
SHAPES = ("bytes", "batching", "plain", "instances")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Repository:
    root = tmp_path_factory.mktemp("latency-fails-closed") / "model_repository"
    shutil.copytree(ROOT / "model_repository", root)
    for name in EXAMPLES:  # a version 2 of each bundled example, the same as its 1
        shutil.copytree(root / name / "1", root / name / "2")
    files = {
        **add_one(
            "crash", UNDER_LOAD_MODEL.format(after=20, action=CRASH), python_config("crash"), {"a": golden_case()}
        ),
        **add_one("hang", UNDER_LOAD_MODEL.format(after=20, action=HANG), python_config("hang"), {"a": golden_case()}),
        **add_one(
            "batching",
            PLAIN,
            python_config("batching") + "dynamic_batching { }\n",
            {
                "one": golden_case(),
                "two": golden_case(shape=(2, 4), data=(1, 2, 3, 4, 5, 6, 7, 8), out=(2, 3, 4, 5, 6, 7, 8, 9)),
            },
        ),
        **add_one(
            "plain",
            PLAIN,
            python_config("plain", max_batch_size=0, dims="[ -1 ]"),
            {"four": golden_case(shape=(4,)), "three": golden_case(shape=(3,), data=(1, 2, 3), out=(2, 3, 4))},
        ),
        **add_one(
            "instances",
            PLAIN,
            python_config("instances") + "instance_group [ { kind: KIND_CPU count: 2 } ]\n",
            {"a": golden_case()},
        ),
        "bytes/config.pbtxt": BYTES_CONFIG,
        "bytes/1/model.py": UPPER_MODEL,
        "bytes/2/model.py": UPPER_MODEL,
        "bytes/golden/four.json": bytes_case(["hello", "Triton", "", "grüße"]),
        "bytes/golden/two.json": bytes_case(["ñandú", "abc"]),
        "counter/config.pbtxt": decoupled_config("counter"),
        "counter/1/model.py": DECOUPLED_MODEL,
        "counter/2/model.py": DECOUPLED_MODEL,
        "counter/golden/three.json": json.dumps(
            {
                "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [3]}],
                "outputs": [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [i]}] for i in range(3)],
            }
        ),
    }
    return Repository.load(write_tree(root, files))


@pytest.fixture(scope="module")
def image(repo, docker_client, unique, stack):
    assert PERF_ANALYZER.exists(), f"{PERF_ANALYZER} is missing: `make stack` installs it (stack/stack.py)"
    tag = f"triton-release-test/latency-fails-closed:{unique}"
    steps.build(repo, ImageOptions(BASE_IMAGE), tag)
    yield tag
    docker_client.images.remove(tag, force=True)


def gated(repo, image, names, bound=None, unmeasured="allow"):
    """The golden cases, drift and the latency gate of `names` (each with a new version 2)."""
    options = LatencyOptions(
        max_increase=bound,
        rounds=1,
        interval_ms=100,
        perf_analyzer=str(PERF_ANALYZER),
        unmeasured=unmeasured,
        env=dict(os.environ),
    )
    return steps.test(
        repo,
        image,
        list(names),
        server_options=ServerOptions(load_timeout=60),
        new_versions=tuple(names),
        gates=GateOptions(latency=options),
    )


def test_a_version_that_crashes_or_hangs_under_load_is_refused_with_a_bound_naming_it(repo, image):
    started = time.monotonic()
    with pytest.raises(Refused) as refused:
        gated(repo, image, ["crash", "hang"], bound=0.5)
    message = " ".join(str(refused.value).split())
    assert message.startswith("Model crash (and hang) version 2 crashed under the latency gate's load"), message
    assert "Stub process 'crash_0' is not healthy" in message and "Nothing is released" in message
    run = refused.value.result
    found = {m.model: m for m in run.latency.models}
    assert found["crash"].verdict == "failed" and found["crash"].under_load.what == "crashed"
    assert found["hang"].verdict == "failed" and found["hang"].under_load.what == "hung"
    assert found["hang"].seconds < 30  # its round's timeout, not perf_analyzer's wait for ever (91 s before)
    assert time.monotonic() - started < 60
    report = run.latency.to_json()
    assert [m["verdict"] for m in report["models"]] == ["failed", "failed"]


def test_every_bundled_example_is_measured(repo, image):
    run = gated(repo, image, EXAMPLES)
    found = {m.model: m for m in run.latency.models}
    for name in EXAMPLES:
        assert found[name].verdict == "measured", (name, found[name].note, found[name].load)
    assert found["text_upper"].load.cases == ("text_upper/ascii",)  # its cases of 5 strings left out
    assert run.latency.to_json()["not_gated"] == []


def test_without_a_bound_every_real_world_shape_is_measured_a_crash_named_and_a_decoupled_model_listed(repo, image):
    run = gated(repo, image, [*SHAPES, "crash", "counter"])
    found = {m.model: m for m in run.latency.models}
    for name in SHAPES:
        assert found[name].verdict == "measured", (name, found[name].note, found[name].load)
    assert {c.concurrency for c in found["instances"].comparisons} == {1, 2}
    assert found["bytes"].load.cases == ("bytes/four",)
    assert found["crash"].verdict == "failed"  # no bound: not refused, and never a quiet skip
    assert found["counter"].verdict == "not gated" and found["counter"].note.startswith("a decoupled model")
    report = run.latency.to_json()
    assert report["not_gated"] == [{"model": "counter", "because": found["counter"].note}]


def test_latency_unmeasured_refuse_refuses_a_model_the_gate_leaves_out(repo, image):
    assert gated(repo, image, ["counter"], bound=0.5).latency.not_gated  # allow: listed, released
    with pytest.raises(Refused) as refused:
        gated(repo, image, ["counter"], bound=0.5, unmeasured="refuse")
    message = " ".join(str(refused.value).split())
    assert "1 model(s) with a new version were not gated" in message and "counter: a decoupled model" in message


def test_a_release_whose_new_version_dies_under_load_exits_1_names_it_and_pushes_nothing(git_repo, releaser):
    fast = ["--latency-rounds", "2", "--latency-interval", "100", "--perf-analyzer", str(PERF_ANALYZER)]
    git_repo.write({"crash/config.pbtxt": python_config("crash"), "crash/1/model.py": PLAIN})
    git_repo.write({"crash/golden/a.json": golden_case()})
    git_repo.commit("crash: adds one")
    releaser(*fast)
    tags = releaser.registry.tags()
    git_repo.write({"crash/1/model.py": UNDER_LOAD_MODEL.format(after=20, action=CRASH)})
    git_repo.commit("crash: its stub exits after 20 requests")
    refused = releaser("--max-latency-increase", "0.5", *fast, code=1)
    message = refused["error"]["message"]
    assert "Model crash version 2 crashed under the latency gate's load" in message, message
    assert "push" not in refused["steps"] and releaser.registry.tags() == tags
    [model] = refused["steps"]["test"]["latency"]["models"]
    assert model["verdict"] == "failed" and model["under_load"]["what"] == "crashed"
