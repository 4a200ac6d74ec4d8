"""One repository shaped like the ones teams run, on the real tritonserver: models calling models
(a literal callee, and one chosen at run time and declared), a KIND_GPU model on this CPU-only
machine, a sequence model, a model answering one input with an error, and a decoupled model that
never sends its final flag."""

from __future__ import annotations

import json
import time

import pytest

from support.models import (
    ACCUMULATOR_MODEL,
    NEVER_FINAL_MODEL,
    PYTHON_MODEL,
    REFUSING_MODEL,
    bls_caller_files,
    decoupled_config,
    golden_case,
    int_tensor,
    python_config,
    python_model_files,
    sequence_case,
    sequence_config,
)
from support.stack import built_image
from triton_release import steps
from triton_release.errors import Refused
from triton_release.models.repository import Repository
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration

DECLARED = '\nparameters { key: "triton_release.depends_on" value: { string_value: "callee" } }\n'


def shop() -> dict[str, str]:
    files = {
        **python_model_files("callee"),
        **bls_caller_files("caller", "callee"),
        **bls_caller_files("router", "callee", computed=True),
    }
    files["router/config.pbtxt"] += DECLARED
    files.update(
        {
            "gpu/config.pbtxt": python_config("gpu")
            + "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]\n",
            "gpu/1/model.py": PYTHON_MODEL,
            "gpu/golden/basic.json": golden_case(),
            "counter/config.pbtxt": sequence_config("counter"),
            "counter/1/model.py": ACCUMULATOR_MODEL,
            "counter/golden/three.json": sequence_case((5, 5), (-1, "negative amount"), (3, 8)),
            "strict/config.pbtxt": python_config("strict", max_batch_size=0, dims="[ 1 ]", dtype="TYPE_INT32"),
            "strict/1/model.py": REFUSING_MODEL,
            "strict/golden/doubles.json": json.dumps(
                {"inputs": [int_tensor("INPUT0", [4])], "outputs": [int_tensor("OUTPUT0", [8])]}
            ),
            "strict/golden/refuses.json": json.dumps(
                {"inputs": [int_tensor("INPUT0", [-3])], "error": "amounts must be at least 0"}
            ),
        }
    )
    return files


NEVER_FINAL = {
    "neverfinal/config.pbtxt": decoupled_config("neverfinal"),
    "neverfinal/1/model.py": NEVER_FINAL_MODEL,
    "neverfinal/golden/one.json": json.dumps(
        {
            "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [1]}],
            "outputs": [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [0]}]],
            "timeout": 3,
        }
    ),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory, docker_client, unique):
    from support.models import write_tree

    root = write_tree(tmp_path_factory.mktemp("shop") / "model_repository", {**shop(), **NEVER_FINAL})
    repo = Repository.load(root)
    with built_image(docker_client, repo, f"trt-shop/all:{unique}") as tag:
        yield repo, tag


def test_every_shape_is_tested_on_the_real_server(served):
    repo, tag = served
    run = steps.test(
        repo, tag, ["caller", "counter", "gpu", "router", "strict"], server_options=ServerOptions(load_timeout=60)
    )
    assert run.passed, [c.message for c in run.failed]
    assert sorted(c.case for c in run.cases) == [
        "caller/basic",
        "counter/three",
        "gpu/basic",
        "router/basic",
        "strict/doubles",
        "strict/refuses",
    ]
    assert "callee" in run.loaded and run.on_cpu == ("gpu",)
    counter = next(c for c in run.cases if c.case == "counter/three")
    assert counter.to_json()["steps_passed"] == 3


def test_a_stream_that_never_ends_fails_at_its_deadline_naming_the_case(served):
    repo, tag = served
    start = time.monotonic()
    with pytest.raises(Refused) as refused:
        steps.test(repo, tag, ["neverfinal"], server_options=ServerOptions(load_timeout=60))
    assert time.monotonic() - start < 60
    assert "neverfinal/golden/one.json" in str(refused.value) and "no final response" in str(refused.value)


def test_changing_only_the_callee_retests_its_callers(git_repo, releaser):
    git_repo.write(shop())
    git_repo.commit("the shop")
    releaser()
    model_py = git_repo.models / "callee" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
    git_repo.commit("callee: same answers, new code")
    second = releaser()
    changes = second["steps"]["changed"]["changes"]
    assert changes["changed"] == ["callee"] and changes["callers"] == ["caller", "router"]
    assert [b["model"] for b in second["steps"]["bump"]["bumps"]] == ["callee"]
    assert sorted(c["case"] for c in second["steps"]["test"]["cases"]) == [
        "callee/basic",
        "caller/basic",
        "router/basic",
    ]
