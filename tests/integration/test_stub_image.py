"""The stub-matched image on the real daemon and the stand-in bases: kept, replaced, refused, verified."""

from __future__ import annotations

import json
import os

import docker
import pytest

from support.models import PYTHON_MODEL, python_model_files
from support.reports import read_report
from support.stack import BASE_IMAGE, SERVERS
from triton_release import steps
from triton_release.cli.main import main
from triton_release.errors import Refused
from triton_release.image import base as baseimage
from triton_release.image import stub
from triton_release.models import golden, inference
from triton_release.models.repository import Repository
from triton_release.server.container import TritonServer
from triton_release.settings import ImageOptions

pytestmark = pytest.mark.integration

STUB38 = "local/tritonserver:24.10-py3-stub38"
TRIXIE = "local/tritonserver:24.10-py3-trixie"


@pytest.fixture
def one_model(make_repo):
    return Repository.load(make_repo(python_model_files("m")))


def build(repo, base, tag, image_tags, stub: str = "auto"):
    image_tags.append(tag)
    return steps.build(repo, ImageOptions(base, stub=stub), tag)


def serve_and_test(docker_client, repo, tag) -> list[inference.CaseResult]:
    with TritonServer(tag, {"m": 1}, load_timeout=60, client=docker_client) as server:
        cases = [golden.load_case(path, "m")[0] for path in repo["m"].golden_cases]
        return [inference.run_case(case, server.http_url, server.grpc_url) for case in cases]


def cli(*args: str, report=None) -> tuple[int, dict]:
    code = main([*args, "--report", str(report)])
    return code, read_report(report)


def test_matching_base_keeps_the_stock_stub(docker_client, one_model, unique, image_tags):
    built = build(one_model, BASE_IMAGE, f"trt-stub/keep:{unique}", image_tags)
    assert built.stub.kept and built.stub.provider == "stock"
    assert (built.stub.target_python, built.stub.triton_version) == ("3.11", "2.51.0")
    labels = docker_client.images.get(built.build.tag).labels
    assert labels["triton-release.python"] == "3.11"
    assert json.loads(labels["triton-release.models"]) == {"m": [1]}
    assert docker_client.images.get(built.build.tag).attrs["Config"]["Cmd"] == [
        "tritonserver",
        "--model-repository=/models",
    ]
    assert all(r.passed for r in serve_and_test(docker_client, one_model, built.build.tag))


def test_stub38_base_gets_the_311_stub_and_the_model_loads(docker_client, one_model, unique, image_tags):
    built = build(one_model, STUB38, f"trt-stub/stub38:{unique}", image_tags)
    assert not built.stub.kept
    assert (built.stub.provider, built.stub.stock_python, built.stub.target_python) == ("wheel", "3.8", "3.11")
    assert "replaced the stock stub (Python 3.8)" in built.stub.summary()
    links = baseimage.check_stub(docker_client, built.build.tag)
    assert links.loads and links.resolved_to.endswith("libpython3.11.so.1.0")
    assert all(r.passed for r in serve_and_test(docker_client, one_model, built.build.tag))


@pytest.mark.parametrize(
    ("base", "flags", "fragments"),
    [
        # --stub stock on a mismatch: in seconds, never by waiting for a hung load
        (STUB38, ["--stub", "stock"], ["libpython3.8.so.1.0 (Python 3.8)", "Python 3.11"]),
        (BASE_IMAGE, ["--python", "3.12"], ["no Python 3.12 (it has: 3.11)", "--python 3.11"]),
    ],
    ids=["stock stub on a mismatch", "a python the base lacks"],
)
def test_refused_before_building(docker_client, make_repo, unique, tmp_path, base, flags, fragments):
    root = make_repo(python_model_files("m"))
    tag = f"trt-stub/refused-{flags[0][2:]}:{unique}"
    code, report = cli(
        "build", "--model-repository", str(root), "--base-image", base, "--tag", tag, *flags, report=tmp_path / "r.json"
    )
    assert code == 1
    for fragment in fragments:
        assert fragment in report["error"]["message"]
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)
    assert not docker_client.containers.list(all=True, filters={"label": SERVERS})


def test_trixie_numpy_2_with_the_wheels_313_stub_is_refused_before_any_build(
    docker_client, one_model, unique, image_tags
):
    """Debian 13's numpy 2.2 with the wheel's 3.13 stub (pybind11 2.10): every answer would fail
    with `output tensor shape does not match size of output`. Refused, naming the ways out."""
    tag = f"trt-stub/trixie:{unique}"
    with pytest.raises(Refused) as refused:
        build(one_model, TRIXIE, tag, image_tags)
    message = str(refused.value)
    assert "Python 3.13 has numpy 2." in message and "the wheel stub for Triton 2.51.0" in message
    assert "numpy<2" in message and "--stub source" in message
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)


def test_requirements_are_the_models_own_environment_for_the_target_python(
    docker_client, make_repo, unique, image_tags
):
    files = python_model_files("m")
    files["m/requirements.txt"] = "six==1.16.0  # pure Python\n"
    files["m/1/model.py"] = "import six\n\nassert six.__version__ == '1.16.0', six.__version__\n\n" + PYTHON_MODEL
    repo = Repository.load(make_repo(files))
    built = build(repo, BASE_IMAGE, f"trt-stub/reqs:{unique}", image_tags)
    env = built.environments.by_model["m"]
    assert env.packages == {"six": "1.16.0"} and env.to_json()["path"] == "/opt/triton-release/envs/m"
    assert all(r.passed for r in serve_and_test(docker_client, repo, built.build.tag))


def test_a_models_conflicting_requirements_are_refused_naming_its_lines(docker_client, make_repo, unique, image_tags):
    files = {**python_model_files("a"), "a/requirements.txt": "six>=1.16\n# old\nsix<1.16\n"}
    repo = Repository.load(make_repo(files))
    with pytest.raises(Refused) as refused:
        build(repo, BASE_IMAGE, f"trt-stub/conflict:{unique}", image_tags)
    message = str(refused.value)
    assert "requirements of model a" in message and "a/requirements.txt:1" in message
    assert "a/requirements.txt:3" in message


def test_a_user_stub_is_used_and_a_wrong_one_refused(docker_client, one_model, unique, image_tags):
    stub311, _ = stub.wheel_stub("2.51.0", "3.11")
    built = build(one_model, STUB38, f"trt-stub/path:{unique}", image_tags, stub=f"path:{stub311}")
    assert (built.stub.provider, built.stub.origin) == ("path", str(stub311))
    stub38, _ = stub.wheel_stub("2.51.0", "3.8")
    with pytest.raises(Refused, match="links libpython3.8.so.1.0, but the models run on Python 3.11"):
        build(one_model, BASE_IMAGE, f"trt-stub/path38:{unique}", image_tags, stub=f"path:{stub38}")


def test_a_stub_with_a_missing_library_fails_the_check_after_the_build(docker_client, one_model, unique, tmp_path):
    broken = tmp_path / "triton_python_backend_stub"
    broken.write_bytes(stub.wheel_stub("2.51.0", "3.11")[0].read_bytes())
    stub.patchelf("--add-needed", "libmissing-for-test.so.1", str(broken))
    tag = f"trt-stub/broken:{unique}"
    with pytest.raises(Refused, match="cannot find libmissing-for-test.so.1") as refused:
        steps.build(one_model, ImageOptions(BASE_IMAGE, stub=f"path:{broken}"), tag)
    assert "The image was removed" in str(refused.value)
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)


def test_source_provider_without_network_fails_clearly(docker_client, make_repo, unique, tmp_path, monkeypatch):
    root = make_repo(python_model_files("m"))
    for name in ("https_proxy", "HTTPS_PROXY"):  # nothing listens there: GitHub is unreachable
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    code, report = cli(
        "build",
        "--model-repository",
        str(root),
        "--base-image",
        STUB38,
        "--tag",
        f"trt-stub/source:{unique}",
        "--stub",
        "source",
        report=tmp_path / "r.json",
    )
    assert code == 3
    message = report["error"]["message"]
    assert "building python_backend r24.10 needs its sources from GitHub" in message
    assert "https://github.com/triton-inference-server/python_backend could not be read" in message
    assert "--stub path:FILE" in message and "--stub-sources" in message
    assert os.environ["https_proxy"] == "http://127.0.0.1:9"


def test_a_backend_the_base_lacks_is_refused_at_base_inspection(docker_client, make_repo, unique, tmp_path):
    """An onnxruntime model beside Python ones on a base that has only the python backend: refused
    (exit 1) when the base is inspected, naming the model, its backend and the base's backends;
    nothing built, no server started."""
    onnx = 'name: "scorer"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
    onnx += 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\noutput [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    root = make_repo({**python_model_files("m"), "scorer/config.pbtxt": onnx, "scorer/1/model.onnx": b"\0"})
    tag = f"trt-stub/no-onnx:{unique}"
    code, report = cli(
        "build", "--model-repository", str(root), "--base-image", BASE_IMAGE, "--tag", tag, report=tmp_path / "r.json"
    )
    message = report["error"]["message"]
    assert code == 1, message
    assert "scorer needs the onnxruntime backend" in message and "holds only python" in message, message
    assert "Fix the model" not in message and "initialize" not in message
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)
    assert not docker_client.containers.list(all=True, filters={"label": SERVERS})


def test_an_image_never_built_is_a_usage_error_without_a_pull(docker_client, one_model, unique, tmp_path):
    """`test --image X` of a name with no registry host that this Docker host lacks: exit 2 saying
    to build it, never a pull from Docker Hub (whose DNS error said nothing of the mistake)."""
    image = f"trt-never-built/models:{unique}"
    code, report = cli("test", "--model-repository", str(one_model.root), "--image", image, report=tmp_path / "r.json")
    message = report["error"]["message"]
    assert code == 2, message
    assert f"no such local image {image}: build it with `triton-release build --tag {image}`" in message
    assert "registry-1.docker.io" not in message
    assert not docker_client.containers.list(all=True, filters={"label": SERVERS})
