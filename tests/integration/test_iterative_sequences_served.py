"""Iterative-sequence models (`sequence_batching { iterative_sequence: true }`) on a real
tritonserver: each model reschedules its request itself until it is done, as NVIDIA's QA models
request_rescheduling_addsub and iterative_sequence do (server r24.10,
qa/L0_backend_python/request_rescheduling). Their plain cases pass validate and then pass on the
server, sent as NVIDIA's tests send them: a plain request without a correlation id (HTTP and
gRPC), and for the decoupled one a gRPC stream with sequence id 0 and no START/END. One server."""

from __future__ import annotations

import json

import pytest

from support.models import int_tensor, iterative_config, write_tree
from support.stack import SERVERS
from triton_release import steps
from triton_release.models.repository import Repository
from triton_release.models.validate import validate
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration

RESCHEDULING_MODEL = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Iterative, not decoupled: each request is released with RESCHEDULE twice and answered on its
    third execution, OUTPUT0 = INPUT0 + the executions it took (3), which only rescheduling gives."""

    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.executions += 1
            if self.executions < 3:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", (x + self.executions)
                                                                         .astype(np.int32))]))
            self.executions = 0
        return responses
'''

COUNTDOWN_MODEL = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Iterative and decoupled: INPUT0 = n sends n responses, n-1 down to 0, one per execution,
    rescheduling the request after each but the last, which carries the final flag."""

    def initialize(self, args):
        self.remaining = None

    def execute(self, requests):
        for request in requests:
            if self.remaining is None:
                self.remaining = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            self.remaining -= 1
            sender = request.get_response_sender()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([self.remaining], np.int32))])
            if self.remaining <= 0:
                self.remaining = None
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
'''


def plain_case(value: int, outputs, **extra) -> str:
    return json.dumps({"inputs": [int_tensor("INPUT0", [value])], "outputs": outputs, **extra}, indent=2)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("iterative") / "model_repository"
    write_tree(
        root,
        {
            "resched/config.pbtxt": iterative_config("resched"),
            "resched/1/model.py": RESCHEDULING_MODEL,
            "resched/golden/http.json": plain_case(3, [int_tensor("OUTPUT0", [6])]),
            "resched/golden/grpc.json": plain_case(10, [int_tensor("OUTPUT0", [13])], protocol="grpc"),
            "countdown/config.pbtxt": iterative_config("countdown", decoupled=True),
            "countdown/1/model.py": COUNTDOWN_MODEL,
            "countdown/golden/three.json": plain_case(3, [[int_tensor("OUTPUT0", [n])] for n in (2, 1, 0)]),
            "countdown/golden/one.json": plain_case(1, [[int_tensor("OUTPUT0", [0])]]),
        },
    )
    return Repository.load(root)


def test_plain_cases_of_iterative_models_pass_validate_and_the_server(docker_client, repo, image):
    result = validate(repo.root)
    assert result.problems == (), [str(p) for p in result.problems]
    before = {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})}
    run = steps.test(
        repo.root, image, ["countdown", "resched"], server_options=ServerOptions(load_timeout=60)
    )  # one server, both models
    by_case = {c.case: c for c in run.cases}
    assert sorted(by_case) == ["countdown/one", "countdown/three", "resched/grpc", "resched/http"]
    assert run.passed, {c.case: c.message for c in run.failed}
    assert [o.name for o in by_case["countdown/three"].outputs] == ["OUTPUT0"] * 3  # three responses, then final
    assert {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})} == before
