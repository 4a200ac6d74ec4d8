"""A test server skips auto-complete only where it changes nothing: each model of the examples (and a
model without batching, one with sequence batching and a decoupled one) is served with the same
config with --disable-auto-complete-config as with tritonserver's default, on the real server;
a model whose model.py completes its config keeps auto-complete on for the whole server."""

from __future__ import annotations

import json
import shutil

import pytest
import requests

from support.models import (
    auto_complete_files,
    decoupled_config,
    golden_case,
    python_config,
    python_model_files,
    sequence_config,
    write_tree,
)
from support.stack import BASE_IMAGE, ROOT
from triton_release.contract import MODELS_LABEL
from triton_release.image.build import build_image
from triton_release.models.config.completion import image_held
from triton_release.models.repository import Repository
from triton_release.models.suite import models_to_load
from triton_release.server.container import TritonServer

pytestmark = pytest.mark.integration

PLAIN = ("nobatch", "sequence", "streaming")


@pytest.fixture(scope="module")
def image(docker_client, tmp_path_factory, unique):
    """The examples and three more shapes, with a model that completes its own config beside them."""
    root = tmp_path_factory.mktemp("auto-complete") / "model_repository"
    shutil.copytree(ROOT / "model_repository", root)
    files = {**python_model_files("nobatch", max_batch_size=0), **python_model_files("sequence")}
    files |= {**python_model_files("streaming"), **auto_complete_files("completing")}
    files["sequence/config.pbtxt"] = sequence_config("sequence")
    files["streaming/config.pbtxt"] = decoupled_config("streaming")
    files["completing/config.pbtxt"] = 'name: "completing"\nbackend: "python"\n'  # as the build writes it
    write_tree(root, files)
    tag = f"triton-release-test/auto-complete:{unique}"
    repo = Repository.load(root)
    held = {MODELS_LABEL: json.dumps({m.name: list(m.versions) for m in repo})}  # as the build step labels it
    build_image(repo, BASE_IMAGE, tag, held, client=docker_client)
    yield repo, tag
    docker_client.images.remove(tag, force=True)


def held_versions(docker_client, tag: str, names) -> dict[str, list[int]]:
    shipped = json.loads(docker_client.images.get(tag).labels[MODELS_LABEL])
    return {name: shipped[name] for name in names}


def served_configs(docker_client, tag: str, repo: Repository, names, auto_complete: bool) -> dict[str, dict]:
    with TritonServer(
        tag, models_to_load(repo, names), load_timeout=120, client=docker_client, auto_complete=auto_complete
    ) as server:
        assert ("--disable-auto-complete-config" in server.command()) is not auto_complete
        return {
            name: requests.get(f"http://{server.http_url}/v2/models/{name}/config", timeout=10).json()
            for name in models_to_load(repo, names)
        }


def test_without_a_model_completing_its_config_the_same_configs_are_served_without_auto_complete(docker_client, image):
    repo, tag = image
    names = sorted(set(repo.models) - {"completing"})
    _, why = image_held(docker_client, tag, held_versions(docker_client, tag, models_to_load(repo, names)))
    assert why is None
    with_it = served_configs(docker_client, tag, repo, names, auto_complete=True)
    without = served_configs(docker_client, tag, repo, names, auto_complete=False)
    assert set(with_it) >= {*PLAIN, "add_sub", "pipeline"}
    assert without == with_it


def test_a_model_completing_its_config_keeps_auto_complete_on_and_is_served_completed(docker_client, image):
    repo, tag = image
    _, why = image_held(docker_client, tag, held_versions(docker_client, tag, ["completing", "nobatch"]))
    assert why == "completing/1/model.py may complete its config (auto_complete_config)"
    [config] = served_configs(docker_client, tag, repo, ["completing"], auto_complete=True).values()
    assert config["max_batch_size"] == 4  # what its auto_complete_config set


def test_an_image_not_saying_which_versions_it_holds_keeps_auto_complete_on(docker_client, image):
    _, tag = image
    _, why = image_held(docker_client, tag, {"nobatch": []})
    assert why == "the image does not say which version folders of nobatch it holds"


def test_an_image_built_here_has_its_model_files_read_from_its_repository_and_its_configs_from_the_image(
    docker_client, image, tmp_path
):
    repo, tag = image
    versions = held_versions(docker_client, tag, ["completing", "nobatch"])
    from_image = image_held(docker_client, tag, versions)
    assert image_held(docker_client, tag, versions, built_from=repo.root) == from_image
    # the folder it was built from is what is read of the version folders: here another one
    other = tmp_path / "model_repository"
    shutil.copytree(repo.root, other)
    shutil.copy(other / "nobatch" / "1" / "model.py", other / "completing" / "1" / "model.py")
    (other / "completing" / "config.pbtxt").write_text('name: "completing"\nbackend: "python"\nmax_batch_size: 9\n')
    configs, why = image_held(docker_client, tag, versions, built_from=other)
    assert why is None
    assert configs == from_image[0]  # the configs still the image's


# a model whose class gets auto_complete_config through locals(): it adds dynamic batching, and the
# model adds 2 where it is served with it (its image's own command, auto-complete on), else 1
UNNAMED_COMPLETION = """\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _complete(config):
    config.set_dynamic_batching()
    return config


class TritonPythonModel:
    locals()["auto_complete" + "_config"] = staticmethod(_complete)

    def initialize(self, args):
        self.offset = 2.0 if "dynamic_batching" in json.loads(args["model_config"]) else 1.0

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + self.offset).astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

# run inside the released image's own server: its config and the golden case's answer, as JSON
ASK_THE_SERVER = """\
import json, sys, time, urllib.request
base, model = "http://127.0.0.1:8000", sys.argv[1]
deadline = time.time() + 120
while True:
    try:
        if urllib.request.urlopen(f"{base}/v2/models/{model}/ready", timeout=2).status == 200:
            break
    except OSError:
        pass
    if time.time() > deadline:
        raise SystemExit("the model never became ready")
    time.sleep(0.5)
config = json.load(urllib.request.urlopen(f"{base}/v2/models/{model}/config", timeout=10))
case = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
request = urllib.request.Request(
    f"{base}/v2/models/{model}/infer", data=json.dumps(case).encode(), headers={"Content-Type": "application/json"}
)
print(json.dumps({"config": config, "outputs": json.load(urllib.request.urlopen(request, timeout=30))["outputs"]}))
"""


def served_by_its_own_command(docker_client, image: str, model: str) -> dict:
    """`image` run as a user runs it (its own command, no arguments), asked from inside for the
    model's config and its answer to the golden input."""
    container = docker_client.containers.run(image, detach=True)
    try:
        code, out = container.exec_run(["python3", "-c", ASK_THE_SERVER, model])
        assert code == 0, out.decode()[-3000:] + container.logs().decode()[-3000:]
        return json.loads(out.decode().strip().splitlines()[-1])
    finally:
        container.remove(force=True)


def test_a_model_given_the_method_unnamed_is_tested_as_its_released_image_serves_it(git_repo, releaser, docker_client):
    """The check read `locals()[...] = ...` as "does not complete its config": the tests ran with
    auto-complete off (the model added 1), the image's own command with it on (it adds 2). The
    golden case says what the image serves; it passes, and the released image, run under its own
    command, serves the config and the answer that were tested."""
    git_repo.write(
        {
            "dyn/config.pbtxt": python_config("dyn"),
            "dyn/1/model.py": UNNAMED_COMPLETION,
            "dyn/golden/basic.json": golden_case(out=(3, 4, 5, 6)),
        }
    )
    git_repo.commit("a model completing its config through locals()")
    report = releaser()
    assert report["version"] == "1.0.0"
    docker_client.images.pull(releaser.target, tag="1.0.0")
    try:
        served = served_by_its_own_command(docker_client, f"{releaser.target}:1.0.0", "dyn")
    finally:
        docker_client.images.remove(f"{releaser.target}:1.0.0", force=True)
    assert "dynamic_batching" in served["config"]
    assert served["outputs"][0]["data"] == [3, 4, 5, 6]
