"""The stack itself: the daemon, the registry, and the stand-in images it promises."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import time

import docker
import pytest
import requests
import semver

from support.stack import REGISTRY, ROOT
from triton_release.history.releases import next_version, previous_release
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.integration

STANDINS = {
    "local/tritonserver:24.10-py3": ("3.11", "3.11"),
    "local/tritonserver:24.10-py3-stub38": ("3.11", "3.8"),
    "local/tritonserver:24.10-py3-trixie": ("3.13", "3.11"),
}


@pytest.mark.parametrize(("tag", "pythons"), STANDINS.items())
def test_stand_in_images_are_laid_out_like_nvidias(docker_client, tag, pythons):
    image = docker_client.images.get(tag)
    env = dict(e.split("=", 1) for e in image.attrs["Config"]["Env"])
    assert env["TRITON_SERVER_VERSION"] == "2.51.0" and env["NVIDIA_TRITON_SERVER_VERSION"] == "24.10"
    script = (
        "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'; "
        "ldd /opt/tritonserver/backends/python/triton_python_backend_stub | grep -o 'libpython3[.][0-9]*' | sort -u; "
        "test -x /opt/tritonserver/bin/tritonserver && echo server-ok"
    )
    out = docker_client.containers.run(tag, ["bash", "-c", script], remove=True).decode().split()
    python, stub_python = pythons
    assert out == [python, f"libpython{stub_python}", "server-ok"]


def test_python_slim_answers_like_the_official_image(docker_client):
    out = docker_client.containers.run(
        "python:3.11-slim", ["sh", "-c", "python --version && pip --version"], remove=True
    ).decode()
    assert "Python 3.11" in out and "pip " in out


def tiny_image(docker_client, tag: str, content: bytes) -> None:
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", b"FROM scratch\nCOPY payload /payload\n"), ("payload", content)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    try:
        docker_client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    except docker.errors.BuildError as exc:
        # a cached image of the same payload, removed by another test or run as this build looked
        # it up: built again, the cache no longer offers it
        if "unable to find image" not in str(exc):
            raise
        context.seek(0)
        docker_client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)


def test_push_to_the_stack_registry_and_read_the_tags_back(docker_client, unique, image_tags):
    repo = RegistryRepository.parse(f"{REGISTRY}/triton-release-test/push-{unique}")
    assert repo.tags() == []
    for tag in ("1.0.0", "latest"):
        image_tags.append(f"{repo}:{tag}")
        tiny_image(docker_client, f"{repo}:{tag}", f"payload {unique}".encode())
        for line in docker_client.images.push(str(repo), tag=tag, stream=True, decode=True):
            assert "error" not in line, line
    assert repo.tags() == ["1.0.0", "latest"]
    digest = repo.digest("1.0.0")
    assert digest and digest.startswith("sha256:") and digest == repo.digest("latest")
    assert repo.digest("9.9.9") is None


def test_second_stack_up_is_fast_and_finds_everything(stack):
    start = time.monotonic()
    result = subprocess.run([sys.executable, str(ROOT / "stack" / "stack.py"), "up"], capture_output=True, text=True)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert "building" not in result.stderr and "starting" not in result.stderr, result.stderr
    assert requests.get(f"http://{REGISTRY}/v2/", timeout=2).status_code == 200
    print(f"second `stack.py up` took {elapsed:.2f} s")


def test_previous_release_is_read_from_the_registry(docker_client, unique, image_tags):
    repo = RegistryRepository.parse(f"{REGISTRY}/triton-release-test/versions-{unique}")
    assert previous_release(repo.tags()) == (None, "none")
    for tag in ("1.2.0", "1.10.0", "1.9.3", "latest", "sha-0123456789ab"):
        image_tags.append(f"{repo}:{tag}")
        tiny_image(docker_client, f"{repo}:{tag}", tag.encode())
        for line in docker_client.images.push(str(repo), tag=tag, stream=True, decode=True):
            assert "error" not in line, line
    previous = previous_release(repo.tags())
    assert previous == (semver.Version(1, 10, 0), "registry")
    assert next_version(previous[0], "minor") == semver.Version(1, 11, 0)
