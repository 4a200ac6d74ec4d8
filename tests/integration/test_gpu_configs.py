"""KIND_GPU instance groups served by the real tritonserver on this machine, which has no GPU:
loaded through the repository API with their config made KIND_CPU (the image untouched, a
model's environment kept), in the first wave or a later one, behind an ensemble; a model that
cannot run on a CPU reported untested, or refused with gpu_models require; and a GPU request
the Docker host cannot meet refused as an infrastructure failure."""

from __future__ import annotations

import io

import pytest

from support.models import PYTHON_MODEL, golden_case, pipeline_files, python_model_files, write_tree
from support.stack import BASE_IMAGE, SERVERS
from support.wheels import make_wheel, offline_index
from triton_release import steps
from triton_release.console import Console
from triton_release.errors import Refused
from triton_release.models.repository import Repository
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration

GPU_GROUPS = "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]\n"
GPU_ONLY_MODEL = """\
class TritonPythonModel:
    def initialize(self, args):
        if args["model_instance_kind"] != "GPU":
            raise RuntimeError(f"CUDA is required, got a {args['model_instance_kind']} instance")

    def execute(self, requests):
        return []
"""


def gpu_model(name: str) -> dict[str, str]:
    files = python_model_files(name)
    files[f"{name}/config.pbtxt"] += GPU_GROUPS
    return files


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """add (no instance group), gpu (KIND_GPU count 2), envgpu (KIND_GPU, its model.py imports a
    package only its requirements.txt environment has), pipe (an ensemble of gpu then add), and
    gpuonly (KIND_GPU, refuses to initialize on a CPU)."""
    files = {
        **python_model_files("add"),
        **gpu_model("gpu"),
        **gpu_model("envgpu"),
        **gpu_model("gpuonly"),
        **pipeline_files("pipe", "gpu", "add"),
    }
    files["envgpu/1/model.py"] = "import shared\n\nassert shared.__version__ == '1.0'\n\n" + PYTHON_MODEL
    files["envgpu/requirements.txt"] = "shared==1.0\n"
    files["gpuonly/1/model.py"] = GPU_ONLY_MODEL
    files["gpuonly/golden/basic.json"] = golden_case()
    return Repository.load(write_tree(tmp_path_factory.mktemp("gpu") / "model_repository", files))


@pytest.fixture(scope="module")
def image(docker_client, repo, unique, tmp_path_factory):
    index = tmp_path_factory.mktemp("index")
    make_wheel(index, "shared", "1.0")
    tag = f"triton-release-test/gpu-configs:{unique}"
    with pytest.MonkeyPatch.context() as patch:
        offline_index(patch, index)
        built = steps.build(repo, BASE_IMAGE, tag)
    assert list(built.environments.by_model) == ["envgpu"]
    yield tag
    docker_client.images.remove(tag, force=True)


def servers(docker_client) -> set[str]:
    return {c.id for c in docker_client.containers.list(all=True, filters={"label": SERVERS})}


def test_kind_gpu_models_pass_on_this_cpu_only_machine_and_are_reported_as_tested_on_cpu(repo, image):
    before = {m.name: m.config_path.read_text() for m in repo}
    run = steps.test(repo, image, ["add", "envgpu", "gpu", "pipe"], server_options=ServerOptions(load_timeout=60))
    assert run.passed and sorted(c.case for c in run.cases) == ["add/basic", "envgpu/basic", "gpu/basic", "pipe/basic"]
    assert run.on_cpu == ("envgpu", "gpu") and run.needs_gpu == ()  # envgpu loaded: its environment applied
    assert run.to_json()["tested_on_cpu"] == ["envgpu", "gpu"]
    assert {m.name: m.config_path.read_text() for m in repo} == before
    out = io.StringIO()
    Console(out=out, err=out).golden_run(run)
    on_cpu = sorted(
        line.split()[1] for line in out.getvalue().splitlines() if line.startswith("PASS") and "tested on CPU" in line
    )
    assert on_cpu == ["envgpu/basic", "gpu/basic"]


def test_a_model_that_needs_a_gpu_is_reported_untested_and_refused_with_gpu_models_require(docker_client, repo, image):
    run = steps.test(repo, image, ["add", "gpuonly"], server_options=ServerOptions(load_timeout=60))
    assert run.passed and [c.case for c in run.cases] == ["add/basic"]
    [(name, why)] = run.needs_gpu
    assert name == "gpuonly" and why == "RuntimeError: CUDA is required, got a CPU instance"
    assert run.to_json()["not_tested_needs_gpu"] == {"gpuonly": why}
    before = servers(docker_client)
    with pytest.raises(Refused) as refused:
        steps.test(repo, image, ["add", "gpuonly"], server_options=ServerOptions(load_timeout=60, gpu_models="require"))
    assert "gpuonly" in refused.value.message and "CUDA is required, got a CPU instance" in refused.value.message
    assert servers(docker_client) == before


def test_a_kind_gpu_model_in_a_later_wave_is_loaded_for_the_cpu_too(repo, image):
    run = steps.test(
        repo, image, ["add", "gpu", "gpuonly"], server_options=ServerOptions(load_timeout=60, max_loaded=1)
    )
    assert run.passed and [c.case for c in run.cases] == ["add/basic", "gpu/basic"]
    assert [w.loaded for w in run.waves] == [("add",), ("gpu",), ()]
    assert run.on_cpu == ("gpu",) and [name for name, _ in run.needs_gpu] == ["gpuonly"]


def test_gpus_on_a_docker_host_without_a_gpu_runtime_exits_3_and_leaves_no_container(
    docker_client, repo, image, cli_report
):
    before = servers(docker_client)
    found = cli_report(
        "test", "--image", image, "--model-repository", str(repo.root), "--models", "add", "--gpus", "all", code=3
    )
    message = found["error"]["message"]
    assert "no GPU runtime" in message and "NVIDIA Container Toolkit" in message and "--gpus" in message
    assert servers(docker_client) == before


OFFSET_MODEL = '''\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Adds its config's OFFSET parameter to INPUT0: it answers with whichever config it was loaded with."""

    def initialize(self, args):
        self.offset = float(json.loads(args["model_config"])["parameters"]["OFFSET"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + self.offset).astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
'''


def offset_model(offset: int) -> dict[str, str]:
    files = gpu_model("offset")
    files["offset/config.pbtxt"] += f'parameters {{ key: "OFFSET" value: {{ string_value: "{offset}" }} }}\n'
    files["offset/1/model.py"] = OFFSET_MODEL
    return files


def test_test_image_serves_the_kind_gpu_config_inside_the_image_not_the_checkouts(
    docker_client, unique, tmp_path, image_tags, cli_report
):
    """The image was built with OFFSET 5 (a wrong answer); the checkout says 1, as its golden case
    does. The CPU config is made from the image's config.pbtxt, so the image's answer is tested."""
    built = write_tree(tmp_path / "built" / "model_repository", offset_model(5))
    tag = f"triton-release-test/gpu-offset:{unique}"
    image_tags.append(tag)
    steps.build(Repository.load(built), BASE_IMAGE, tag)
    checkout = write_tree(tmp_path / "checkout" / "model_repository", offset_model(1))
    before = servers(docker_client)
    tested = cli_report("test", "--image", tag, "--model-repository", str(checkout), "--models", "offset", code=1)
    assert "1 of 1 golden cases failed" in tested["error"]["message"]
    [case] = tested["steps"]["test"]["cases"]
    assert case["case"] == "offset/basic" and not case["passed"]
    assert tested["steps"]["test"]["tested_on_cpu"] == ["offset"]
    # the image's answer is what its golden case must hold: +5 passes, whatever the checkout's config says
    write_tree(checkout, {"offset/golden/basic.json": golden_case(out=(6, 7, 8, 9))})
    cli_report("test", "--image", tag, "--model-repository", str(checkout), "--models", "offset")
    assert servers(docker_client) == before
    assert not docker_client.containers.list(all=True, filters={"ancestor": tag})  # the config reader is gone too
