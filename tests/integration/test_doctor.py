"""`doctor` on the stack: every row green where a release can run; then each failing row with its
fix, every problem listed at once, exit 1: no daemon, a wrong password, and a base image larger
than the daemon's free disk (a registry whose manifest lists a layer bigger than any disk, as the
registry reports it; the free disk as the daemon's DockerRootDir reports it). The start of a
release refuses the same disk shortage before it pulls anything. A base not pulled yet is planned
from its image configuration in the registry: a current NGC release's Triton, and its source stub."""

from __future__ import annotations

import json
import os

import pytest

from support.git import GitRepo
from support.models import python_model_files
from support.reports import read_report
from support.stack import BASE_IMAGE, REGISTRY
from triton_release.cli.main import main
from triton_release.registry.client import Manifest, RegistryRepository
from triton_release.steps.doctor import ROWS

pytestmark = pytest.mark.integration

TIB = 1 << 40


def doctor(tmp_path, capsys, *args: str, env: dict | None = None) -> tuple[int, dict, str]:
    report = tmp_path / "doctor.json"
    code = main(["doctor", "--report", str(report), *args], env={**os.environ, **(env or {})})
    rows = {check["name"]: check for check in read_report(report)["steps"]["doctor"]["checks"]}
    captured = capsys.readouterr()
    return code, rows, captured.out + captured.err


def test_a_stack_that_can_release_is_all_green(tmp_path, capsys, unique):
    code, rows, out = doctor(
        tmp_path,
        capsys,
        "--to",
        f"{REGISTRY}/triton-release-test/doctor-{unique}",
        "--base-image",
        BASE_IMAGE,
        "--keep",
        "1",
    )
    assert code == 0, out
    assert {name: row["status"] for name, row in rows.items()} == dict.fromkeys(ROWS, "ok")
    assert rows["stub plan"]["detail"].startswith("Triton 2.51.0 (NGC 24.10, debian 12), python3 3.11;")
    assert "kept the stock stub" in rows["stub plan"]["detail"]
    assert "the sha256-<hex> tag schema" in rows["referrers API"]["detail"]  # docker-registry 2.8 has none
    assert "a release can run here" in out


def test_every_problem_at_once_with_its_fix(tmp_path, capsys, auth_registry, unique):
    host, _ = auth_registry
    code, rows, out = doctor(
        tmp_path,
        capsys,
        "--to",
        f"{host}/team/doctor-{unique}",
        "--base-image",
        BASE_IMAGE,
        env={
            "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock",
            "TRITON_RELEASE_USERNAME": "ci-bot",
            "TRITON_RELEASE_PASSWORD": "not-the-password",
        },
    )
    assert code == 1
    assert rows["docker daemon"]["status"] == "problem"
    assert "No Docker daemon answers" in rows["docker daemon"]["detail"]
    assert rows["daemon disk"]["status"] == "not checked"
    assert rows["registry"]["status"] == "problem"
    assert "refused to list the tags" in rows["registry"]["detail"]
    assert "as ci-bot (TRITON_RELEASE_USERNAME/_PASSWORD)" in rows["registry"]["detail"]
    assert "not-the-password" not in out
    assert "2 problems: a release cannot run here yet" in out
    assert "docker daemon, registry" in out


@pytest.fixture(scope="module")
def huge_base(unique):
    """A base image in the registry whose manifest lists a 10 TiB layer: the registry checks that
    the blob exists, not its size, so it reports what a larger-than-disk base would."""
    registry = RegistryRepository.parse(f"{REGISTRY}/triton-release-test/huge-base-{unique}")
    layer = registry.put_blob(b"not really ten tebibytes")
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    config_digest = registry.put_blob(config)
    body = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": len(config),
            "digest": config_digest,
        },
        "layers": [
            {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 10 * TIB, "digest": layer}
        ],
    }
    manifest = Manifest.of(body["mediaType"], json.dumps(body).encode())
    registry.put_manifest("24.10-py3", manifest)
    yield f"{registry}:24.10-py3"
    registry.delete(manifest.digest)


def test_a_base_larger_than_the_daemons_disk(tmp_path, capsys, huge_base):
    code, rows, out = doctor(tmp_path, capsys, "--base-image", huge_base)
    assert code == 1
    assert rows["base image"]["status"] == "ok"
    assert "not on the daemon; 10240.0 GiB to download" in rows["base image"]["detail"]
    # its configuration says no Triton release: planned without a source stub, saying why
    assert rows["stub plan"]["status"] == "ok"
    assert "Triton unknown (NGC release not said)" in rows["stub plan"]["detail"]
    assert "no source stub" in rows["stub plan"]["detail"]
    disk = rows["daemon disk"]
    assert disk["status"] == "problem"
    assert "30720.0 GiB for the base's pull" in disk["detail"]
    assert "DockerRootDir" in disk["detail"]
    assert "/usr/share/dotnet" in disk["detail"] and "compose.py" in disk["detail"]
    assert rows["registry"]["status"] == "not checked"


def test_a_release_refuses_the_disk_shortage_before_pulling(tmp_path, huge_base, docker_client, unique):
    git_repo = GitRepo(tmp_path / "work")
    git_repo.write(python_model_files("a"))
    git_repo.commit("one model")
    report = tmp_path / "report.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(git_repo.root)
        code = main(
            [
                "release",
                "--to",
                f"{REGISTRY}/triton-release-test/never-{unique}",
                "--base-image",
                huge_base,
                "--report",
                str(report),
            ]
        )
    assert code == 3
    error = read_report(report)["error"]["message"]
    assert "this release needs about" in error and "more than there is" in error
    assert not docker_client.images.list(name=huge_base.rpartition(":")[0])  # nothing pulled
    assert git_repo.git("status", "--porcelain") == ""  # nothing bumped


def test_the_action_runs_it_as_a_first_step(tmp_path, huge_base, unique):
    """mode: doctor, as a workflow's first step: its table in the log, the problems as errors, exit 1."""
    from triton_release.action.main import main as action_main

    report = tmp_path / "action-report.json"
    env = {
        **os.environ,
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(tmp_path),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "outputs"),
        "INPUT_MODE": "doctor",
        "INPUT_REPOSITORY": f"{REGISTRY}/triton-release-test/doctor-action-{unique}",
        "INPUT_BASE-IMAGE": huge_base,
        "INPUT_REPORT": str(report),
    }
    assert action_main(env) == 1
    found = read_report(report)
    assert found["command"] == "doctor"
    rows = {check["name"]: check["status"] for check in found["steps"]["doctor"]["checks"]}
    assert rows["daemon disk"] == "problem"
    assert rows["registry"] == rows["push"] == "ok"
    assert "A release cannot run here yet: daemon disk" in found["error"]["message"]


def pushed_base(registry: RegistryRepository, tag: str, config: dict) -> tuple[str, Manifest]:
    """A base image in the registry with this image configuration and one tiny layer."""
    layer = registry.put_blob(b"a layer")
    body = json.dumps(config).encode()
    manifest_body = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": len(body),
            "digest": registry.put_blob(body),
        },
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 7, "digest": layer}],
    }
    manifest = Manifest.of(manifest_body["mediaType"], json.dumps(manifest_body).encode())
    registry.put_manifest(tag, manifest)
    return f"{registry}:{tag}", manifest


@pytest.fixture(scope="module")
def current_release(unique):
    """NGC 26.07 as its image configuration says it (Triton 2.71.0; Ubuntu 24.04 by Ubuntu's labels),
    served by the stack's registry: what doctor reads of nvcr.io/nvidia/tritonserver:26.07-py3."""
    registry = RegistryRepository.parse(f"{REGISTRY}/triton-release-test/ngc-{unique}")
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": [
                "PATH=/opt/tritonserver/bin:/usr/bin:/bin",
                "TRITON_SERVER_VERSION=2.71.0",
                "NVIDIA_TRITON_SERVER_VERSION=26.07",
            ],
            "Labels": {
                "com.nvidia.tritonserver.version": "2.71.0",
                "org.opencontainers.image.ref.name": "ubuntu",
                "org.opencontainers.image.version": "24.04",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": []},
    }
    image, manifest = pushed_base(registry, "26.07-py3", config)
    yield image
    registry.delete(manifest.digest)


def test_a_current_release_is_planned_from_its_configuration_without_a_pull(
    tmp_path, capsys, current_release, docker_client
):
    code, rows, out = doctor(tmp_path, capsys, "--base-image", current_release, "--python", "3.11")
    plan = rows["stub plan"]
    assert plan["status"] == "ok", out
    assert plan["detail"].startswith("Triton 2.71.0 (NGC 26.07, ubuntu 24.04); its Pythons and stub are read after")
    assert "else a source stub from python_backend r26.07 for Python 3.11" in plan["detail"]
    assert "CMake 3.31.8 or newer from PyPI" in plan["detail"]
    assert not docker_client.images.list(name=current_release.rpartition(":")[0])  # nothing pulled


def test_an_oversized_image_configuration_is_not_read(tmp_path, capsys, unique):
    registry = RegistryRepository.parse(f"{REGISTRY}/triton-release-test/big-config-{unique}")
    padding = "x" * (1 << 20)
    image, manifest = pushed_base(registry, "1", {"architecture": "amd64", "os": "linux", "padding": padding})
    try:
        code, rows, out = doctor(tmp_path, capsys, "--base-image", image)
    finally:
        registry.delete(manifest.digest)
    assert code == 1
    assert rows["stub plan"]["status"] == "problem"
    assert "larger than 1048576 bytes" in rows["stub plan"]["detail"]
