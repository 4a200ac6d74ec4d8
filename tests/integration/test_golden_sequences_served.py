"""Sequence cases and expected errors on a real tritonserver: stateful models keyed by the
correlation id (Direct and Oldest strategies, HTTP and gRPC, a decoupled stream), a model that
refuses its inputs, and `record` and `test` over such a repository end to end."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from support.models import (
    ACCUMULATOR_MODEL,
    REFUSING_MODEL,
    STREAMING_ACCUMULATOR_MODEL,
    case_file,
    int_tensor,
    python_config,
    sequence_case,
    sequence_config,
    write_tree,
)
from support.stack import SERVERS
from triton_release import steps
from triton_release.errors import Refused
from triton_release.models import inference
from triton_release.models.repository import Repository
from triton_release.server.container import TritonServer
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration


def refuse_case(value: int, **expected) -> str:
    return json.dumps({"inputs": [int_tensor("INPUT0", [value])], **expected})


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("sequences") / "model_repository"
    write_tree(
        root,
        {
            "direct/config.pbtxt": sequence_config("direct"),
            "direct/1/model.py": ACCUMULATOR_MODEL,
            "direct/golden/three.json": sequence_case((1, 1), (2, 3), (3, 6)),
            "direct/golden/refused_step.json": sequence_case(
                (5, 5), (-2, "negative amount -2: the total stays 5"), (1, 6)
            ),
            "oldest/config.pbtxt": sequence_config("oldest", "oldest"),
            "oldest/1/model.py": ACCUMULATOR_MODEL,
            "oldest/golden/three.json": sequence_case((1, 1), (2, 3), (3, 6), batched=True, protocol="grpc"),
            "stream/config.pbtxt": sequence_config("stream", decoupled=True),
            "stream/1/model.py": STREAMING_ACCUMULATOR_MODEL,
            "stream/golden/two.json": json.dumps(
                {
                    "sequence": [
                        {"inputs": [int_tensor("INPUT0", [1])], "outputs": [[int_tensor("OUTPUT0", [1])]]},
                        {"inputs": [int_tensor("INPUT0", [2])], "outputs": [[int_tensor("OUTPUT0", [3])]]},
                    ]
                }
            ),
            "refuse/config.pbtxt": python_config("refuse", max_batch_size=0, dims="[ 1 ]", dtype="TYPE_INT32"),
            "refuse/1/model.py": REFUSING_MODEL,
            "refuse/golden/negative.json": refuse_case(-1, error="negative input -1"),
            "refuse/golden/doubled.json": refuse_case(4, outputs=[int_tensor("OUTPUT0", [8])]),
        },
    )
    return Repository.load(root)


@pytest.fixture(scope="module")
def server(docker_client, image, repo):
    with TritonServer(image, {m: 1 for m in repo.models}, load_timeout=60, client=docker_client) as running:
        yield running


def run(server, tmp_path, model: str, text: str, decoupled: bool = False) -> inference.CaseResult:
    return inference.run_case(case_file(tmp_path, model, text), server.http_url, server.grpc_url, decoupled)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["direct", "oldest"])
def test_a_three_step_sequence_passes(server, tmp_path, model, protocol):
    result = run(
        server, tmp_path, model, sequence_case((1, 1), (2, 3), (3, 6), batched=model == "oldest", protocol=protocol)
    )
    assert result.passed, result.message
    assert (result.steps, result.steps_passed, result.message) == (3, 3, "3 of 3 steps passed")
    assert [o.name for o in result.outputs] == ["OUTPUT0"] * 3


def test_two_sequence_cases_of_one_model_do_not_share_state(server, tmp_path):
    """Run side by side, many times: one correlation id each, so each keeps its own total."""
    (tmp_path / "large").mkdir()
    small = case_file(tmp_path, "oldest", sequence_case(*[(1, i) for i in range(1, 9)], batched=True))
    large = case_file(
        tmp_path / "large",
        "oldest",
        sequence_case(*[(100, 100 * i) for i in range(1, 9)], batched=True, protocol="grpc"),
    )
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda case: inference.run_case(case, server.http_url, server.grpc_url), [small, large] * 3)
        )
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]


def test_a_wrong_step_fails_naming_it_and_the_sequence_still_ends(server, tmp_path):
    result = run(server, tmp_path, "direct", sequence_case((1, 1), (2, 4), (3, 6)))
    assert not result.passed and (result.steps, result.steps_passed) == (3, 2)
    assert result.message.startswith(
        "sequence step 2: output 'OUTPUT0': 1 of 1 element(s) differ; worst at [0]: expected 4, got 3 (abs diff 1, rel diff 0.25)"
    ), result.message
    assert result.message.endswith("(2 of 3 steps passed)")
    again = run(server, tmp_path, "direct", sequence_case((7, 7)))  # the one slot is free again
    assert again.passed, again.message


def test_a_step_may_expect_an_error_and_the_sequence_goes_on(server, repo):
    result = run(server, repo.root, "direct", (repo.root / "direct/golden/refused_step.json").read_text())
    assert result.passed, result.message
    assert result.message == (
        "step 2 answered with the expected error: negative amount -2: the total stays 5 (3 of 3 steps passed)"
    )
    assert result.error == "negative amount -2: the total stays 5"


def test_a_decoupled_sequence_compares_each_steps_responses(server, repo):
    result = run(server, repo.root, "stream", (repo.root / "stream/golden/two.json").read_text(), decoupled=True)
    assert result.passed and result.steps_passed == 2, result.message


def test_a_plain_case_for_a_sequence_model_fails_with_the_sequence_hint(server, tmp_path):
    result = run(server, tmp_path, "direct", refuse_case(1, outputs=[int_tensor("OUTPUT0", [1])]))
    assert not result.passed and "must specify a non-zero or non-empty correlation ID" in result.message
    assert "Hint: the model has sequence_batching" in result.message


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_expected_error_passes_against_the_refusing_model(server, tmp_path, protocol):
    result = run(server, tmp_path, "refuse", refuse_case(-3, error={"regex": r"negative input -\d"}, protocol=protocol))
    assert result.passed, result.message
    assert result.message.startswith(
        "answered with the expected error: Failed to process the request(s) for "
        "model 'refuse_0', message: TritonModelException: negative input -3"
    )
    assert "negative input -3: amounts must be at least 0" in result.error


def test_an_expected_error_fails_when_the_model_answers(server, tmp_path):
    result = run(server, tmp_path, "refuse", refuse_case(3, error="negative input"))
    assert not result.passed and result.error is None
    assert result.message == (
        "expected an error containing 'negative input', but the model answered normally (outputs OUTPUT0)"
    )


def test_an_expected_error_fails_on_another_error_showing_both(server, tmp_path):
    result = run(server, tmp_path, "refuse", refuse_case(-3, error="must be positive"))
    assert not result.passed
    assert result.message.startswith(
        "expected an error containing 'must be positive', got another error: Failed to process the request(s)"
    )
    assert "amounts must be at least 0" in result.message


def test_record_then_test_end_to_end(docker_client, image, repo, tmp_path):
    """record fills in `"error": true` and a sequence's missing outputs, refuses to turn an error into
    outputs (writing nothing to that file); then `test` passes over the whole repository."""
    root = tmp_path / "model_repository"
    shutil.copytree(repo.root, root)
    asks_error = root / "refuse/golden/any_error.json"
    asks_error.write_text(refuse_case(-5, error=True))
    blank = json.loads(sequence_case((1, 1), (2, 3)))
    del blank["sequence"][1]["outputs"]
    (root / "direct/golden/blank.json").write_text(json.dumps(blank))
    wrong = root / "refuse/golden/zz_wrong.json"  # recorded last: refused after the others were written
    wrong.write_text(refuse_case(-7))
    with pytest.raises(Refused) as refused:
        steps.record(root, image, ["direct", "refuse"], server_options=ServerOptions(load_timeout=60))
    assert "zz_wrong.json: the server answered with an error" in str(refused.value)
    assert 'write "error": true in place of "outputs"' in str(refused.value)
    assert wrong.read_text() == refuse_case(-7)
    assert (
        json.loads(asks_error.read_text())["error"] == "TritonModelException: negative input -5: amounts must "
        "be at least 0"
    )
    assert json.loads((root / "direct/golden/blank.json").read_text())["sequence"][1]["outputs"] == [
        int_tensor("OUTPUT0", [3])
    ]
    wrong.unlink()
    before = {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})}
    result = steps.test(root, image, sorted(repo.models), server_options=ServerOptions(load_timeout=60))
    assert result.passed, [c.message for c in result.failed]
    by_case = {c.case: c for c in result.cases}
    assert len(by_case) == 8 and by_case["direct/three"].steps_passed == 3
    assert by_case["refuse/any_error"].error.startswith("Failed to process the request(s)")
    assert by_case["direct/blank"].to_json()["steps"] == 2
    assert {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})} == before
