"""Each example model served by a real tritonserver from the stand-in image, golden cases sent."""

from __future__ import annotations

import pytest

from support.models import PYTHON_MODEL_RAISING
from support.stack import BASE_IMAGE, ROOT, SERVERS
from triton_release.errors import Refused
from triton_release.image.build import build_image
from triton_release.models import golden, inference
from triton_release.models.repository import Repository
from triton_release.models.suite import models_to_load
from triton_release.server.container import TritonServer

pytestmark = pytest.mark.integration

EXAMPLE = Repository.load(ROOT / "model_repository")


@pytest.mark.parametrize("model", sorted(EXAMPLE.models))
def test_example_model_serves_and_passes_its_golden_cases(docker_client, example_image, model):
    cases = EXAMPLE[model].golden_cases
    assert cases, f"{model} has no golden cases"
    with TritonServer(
        example_image.tag, models_to_load(EXAMPLE, [model]), load_timeout=120, client=docker_client
    ) as server:
        loaded = {s.name for s in server.index() if s.state == "READY"}
        assert loaded == set(models_to_load(EXAMPLE, [model]))  # only what was asked for
        for path in cases:
            case, problems = golden.load_case(path, model)
            assert not problems
            result = inference.run_case(case, server.http_url, server.grpc_url)
            assert result.passed, result.message
            assert all(o.max_abs_diff is None or o.max_abs_diff <= 1e-5 for o in result.outputs)


def test_a_wrong_expected_value_fails_naming_the_element(docker_client, example_image, tmp_path):
    path = tmp_path / "wrong.json"
    text = (ROOT / "model_repository/preprocess/golden/positive.json").read_text()
    path.write_text(text)
    case, _ = golden.load_case(path, "preprocess")
    data = list(case.outputs[0].data)
    data[2] += 0.5
    case = golden.GoldenCase(
        path, "preprocess", case.inputs, (golden.Tensor("NORMALIZED", "FP32", case.outputs[0].shape, tuple(data)),)
    )
    with TritonServer(example_image.tag, {"preprocess": 1}, client=docker_client) as server:
        result = inference.run_case(case, server.http_url, server.grpc_url)
    assert not result.passed
    assert "worst at [0, 2]" in result.message and "abs diff 0.5" in result.message


def test_a_model_raising_in_initialize_is_refused_with_its_message(docker_client, tmp_path, unique, image_tags):
    root = tmp_path / "model_repository"
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "model.py").write_text(PYTHON_MODEL_RAISING)
    (root / "broken" / "config.pbtxt").write_text(
        'name: "broken"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    tag = f"triton-release-test/broken:{unique}"
    image_tags.append(tag)
    build_image(Repository.load(root), BASE_IMAGE, tag, client=docker_client)
    before = {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})}
    with pytest.raises(Refused) as err, TritonServer(tag, {"broken": 1}, load_timeout=60, client=docker_client):
        pass
    assert "Model broken failed to load" in str(err.value)
    assert any("weights file is missing" in line for line in err.value.details), err.value.details
    assert {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})} == before


def test_cli_test_command_fails_on_a_golden_mismatch_naming_the_file(example_image, tmp_path, capsys):
    import json
    import shutil

    from triton_release.cli.main import main

    repo = tmp_path / "model_repository"
    shutil.copytree(ROOT / "model_repository", repo)
    case_path = repo / "preprocess" / "golden" / "positive.json"
    case = json.loads(case_path.read_text())
    case["outputs"][0]["data"][1] += 1.0
    case_path.write_text(json.dumps(case))
    code = main(["test", "--image", example_image.tag, "--model-repository", str(repo), "--models", "preprocess"])
    out = capsys.readouterr()
    assert code == 1
    assert "FAIL preprocess/positive" in out.out and "PASS preprocess/mixed" in out.out
    assert str(case_path) in out.err and "worst at [0, 1]" in out.err
