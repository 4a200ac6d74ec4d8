"""The source stub on the real daemon and the real tritonserver: compiled offline from git mirrors
(../shared/triton-sources, standing in for GitHub) for the trixie stand-in's Python 3.13 with
Debian's numpy 2, which neither the stock stub (3.11) nor the wheel's (pybind11 2.10) serves; every
bundled example's golden cases served through it, with a decoupled model, a BLS call and a model
with its own requirements; and a second build with the same inputs compiles nothing.

The compile takes minutes: it runs once per session, in the module fixture `compiled`, which the
tests here share."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from support.models import (
    DECOUPLED_CONFIG,
    DECOUPLED_MODEL,
    PYTHON_MODEL,
    bls_caller_files,
    golden_case,
    python_config,
    write_tree,
)
from support.reports import read_report
from support.stack import ROOT, SERVERS
from support.wheels import make_wheel
from triton_release.image import base as baseimage
from triton_release.image.sources import NAMES

pytestmark = pytest.mark.integration

TRIXIE = "local/tritonserver:24.10-py3-trixie"
MIRRORS = ROOT.parent / "shared" / "triton-sources"


def counter_case(count: int) -> str:
    return json.dumps(
        {
            "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [count]}],
            "outputs": [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [i]}] for i in range(count)],
        }
    )


NEEDS_SHARED = "import shared\n\nassert shared.__version__ == '1.0', shared.__version__\n\n" + PYTHON_MODEL
EXTRA_MODELS = {
    # decoupled: three responses over a gRPC stream
    "counter/config.pbtxt": DECOUPLED_CONFIG,
    "counter/1/model.py": DECOUPLED_MODEL,
    "counter/golden/three.json": counter_case(3),
    # a BLS call of addone
    "addone/config.pbtxt": python_config("addone"),
    "addone/1/model.py": PYTHON_MODEL,
    "addone/golden/basic.json": golden_case(),
    **bls_caller_files("caller", "addone"),
    # its own requirements: an environment (EXECUTION_ENV_PATH) for Python 3.13
    "needs/config.pbtxt": python_config("needs"),
    "needs/1/model.py": NEEDS_SHARED,
    "needs/requirements.txt": "shared==1.0\n",
    "needs/golden/basic.json": golden_case(),
}


@pytest.fixture(scope="module")
def mirrors() -> Path:
    missing = [f"{name}.git" for name in NAMES if not (MIRRORS / f"{name}.git").is_dir()]
    if missing:
        pytest.fail(
            f"The source stub tests compile from git mirrors in {MIRRORS} (beside the repository's folder), "
            f"which lacks {', '.join(missing)}. Put shallow bare clones of python_backend, common, core, "
            "backend (r24.10), pybind11 (v2.13.6), dlpack (v0.8) and googletest (9406a60c) there, named "
            "<name>.git (docs/image.md, 'A source stub without GitHub')."
        )
    return MIRRORS


class Tool:
    """`triton-release` as a user runs it, in a process of its own, with this module's cache folder
    and a pip that sees only the wheels made here."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {
            **os.environ,
            "TRITON_RELEASE_CACHE": str(folder / "cache"),
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(folder / "index"),
            "PIP_CONSTRAINT": "",
        }
        self.runs = 0

    def __call__(self, *args: str) -> tuple[int, dict, str]:
        self.runs += 1
        report = self.folder / f"report-{self.runs}.json"
        done = subprocess.run(
            [sys.executable, "-m", "triton_release", *args, "--report", str(report)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        return done.returncode, read_report(report), done.stdout + done.stderr

    @property
    def repository(self) -> Path:
        return self.folder / "model_repository"

    def build(self, tag: str, stub_sources: Path, stub: str = "source") -> tuple[int, dict, str]:
        """`build` of the module's model repository on the trixie stand-in as `tag`, with the stub
        sources given; `stub` is the --stub flag's value, "" to leave it out (auto)."""
        return self(
            "build",
            "--model-repository",
            str(self.repository),
            "--base-image",
            TRIXIE,
            "--tag",
            tag,
            *(("--stub", stub) if stub else ()),
            "--stub-sources",
            str(stub_sources),
        )


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> Tool:
    folder = tmp_path_factory.mktemp("source-stub")
    make_wheel(folder / "index", "shared", "1.0")
    found = Tool(folder)
    shutil.copytree(ROOT / "model_repository", found.repository)
    write_tree(found.repository, EXTRA_MODELS)
    return found


@pytest.fixture(scope="module")
def compiled(docker_client, tool, mirrors):
    """The one compile of the session: `build --stub source --stub-sources <mirrors>` on the
    trixie stand-in; its image is removed after the module."""
    tag = "trt-source-stub/examples:first"
    code, report, output = tool.build(tag, mirrors)
    yield code, report, output, tag
    for name in (tag, "trt-source-stub/examples:second"):
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(name, force=True)


def stub_of(report: dict) -> dict:
    return report["steps"]["build"]["stub"]


def test_the_stub_is_compiled_offline_from_the_mirrors_for_python_313(docker_client, compiled, mirrors, tool):
    code, report, output, tag = compiled
    assert code == 0, report.get("error")
    stub = stub_of(report)
    assert (stub["provider"], stub["target_python"], stub["stock_stub_python"]) == ("source", "3.13", "3.11")
    assert stub["source"]["compiled"] is True
    assert stub["source"]["from"] == str(mirrors) and stub["source"]["boost"] == "system"
    assert stub["source"]["sources"]["pybind11"]["ref"] == "v2.13.6"
    assert report["steps"]["build"]["base"]["pythons"]["3.13"]["numpy"].startswith("2.")  # Debian 13's
    assert stub["origin"].startswith("python_backend r24.10 (") and "from the mirrors in" in stub["origin"]
    # said before it started, with the estimate; then the builder stage's steps
    assert "compiling python_backend r24.10" in output and "about 2 to 5 minutes" in output, output
    assert "make 100%" in output or "step " in output  # progress while it compiles
    assert "stub from python_backend r24.10" in output and "compiled in this run)" in output
    links = baseimage.check_stub(docker_client, tag)
    assert links.loads and links.resolved_to.endswith("libpython3.13.so.1.0"), links.ldd
    [entry] = (tool.folder / "cache" / "stubs" / "compiled").iterdir()
    facts = json.loads((entry / "stub.json").read_text())
    assert facts["boost"] == "1_83" and facts["inputs"]["python"] == "3.13"  # Debian 13's libboost-dev
    assert {"sha256", "compiler", "seconds"} <= set(facts)
    assert facts["inputs"]["base_image_id"] == docker_client.images.get(TRIXIE).id


def test_every_golden_case_passes_through_it_on_python_313_with_numpy_2(docker_client, compiled, tool):
    code, _, _, tag = compiled
    assert code == 0
    code, report, _ = tool("test", "--model-repository", str(tool.repository), "--image", tag)
    cases = report["steps"]["test"]["cases"]
    assert code == 0, [c for c in cases if not c["passed"]] or report.get("error")
    examples = {f"{p.parent.parent.name}/{p.stem}" for p in (ROOT / "model_repository").glob("*/golden/*.json")}
    extra = {"counter/three", "addone/basic", "caller/basic", "needs/basic"}
    assert {c["case"] for c in cases} == examples | extra  # BYTES (text_upper), an ensemble, decoupled, BLS
    assert all(c["passed"] for c in cases)
    assert not docker_client.containers.list(all=True, filters={"label": SERVERS})


def test_a_second_build_with_the_same_inputs_compiles_nothing(compiled, tool, mirrors):
    code, first, _, _ = compiled
    assert code == 0
    code, report, output = tool.build("trt-source-stub/examples:second", mirrors)
    assert code == 0, report.get("error")
    assert stub_of(report)["source"]["compiled"] is False
    assert stub_of(report)["source"]["cache_key"] == stub_of(first)["source"]["cache_key"]
    assert "compiling python_backend" not in output and "compiled before: from the cache)" in output
    stub_layer = [layer for layer in report["steps"]["build"]["layers"] if layer["name"] == "stub.tar"]
    first_layer = [layer for layer in first["steps"]["build"]["layers"] if layer["name"] == "stub.tar"]
    assert stub_layer and stub_layer == first_layer  # the same content-addressed layer


def test_auto_takes_the_source_stub_past_numpy_2_when_mirrors_are_given(compiled, tool, mirrors):
    """The stock (3.11) and the wheel's 3.13 stub (pybind11 2.10) cannot serve numpy 2: auto goes
    to the source stub, here the one compiled above."""
    code, first, _, _ = compiled
    assert code == 0
    code, report, output = tool.build("trt-source-stub/examples:second", mirrors, stub="")
    assert code == 0, report.get("error")
    stub = stub_of(report)
    assert (stub["mode"], stub["provider"], stub["source"]["compiled"]) == ("auto", "source", False)
    assert stub["source"]["cache_key"] == stub_of(first)["source"]["cache_key"]
    assert stub["tried"] == [
        "stock and wheel: numpy 2.2.4 breaks NVIDIA's stubs of Triton 2.51.0 (pybind11 older than 2.12)"
    ]


def test_a_mirror_folder_missing_a_repository_is_named_before_any_build(docker_client, tool, mirrors, tmp_path):
    partial = tmp_path / "mirrors"
    for name in NAMES:
        if name != "core":
            shutil.copytree(mirrors / f"{name}.git", partial / f"{name}.git")
    tag = "trt-source-stub/examples:refused"
    code, report, _ = tool.build(tag, partial)
    message = report["error"]["message"]
    assert code == 3, message  # the mirror is incomplete: infrastructure
    assert f"stub_sources {partial} holds no core.git" in message
    assert "https://github.com/triton-inference-server/core" in message
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(tag)
