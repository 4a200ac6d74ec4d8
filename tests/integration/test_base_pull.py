"""A release whose base the daemon does not hold: the base is pulled in the background from the
registry while the steps that need no base run, and the release waits for it (the step `pull`)."""

from __future__ import annotations

import contextlib

import docker
import pytest

from support.git import GitRepo
from support.models import python_model_files
from support.reports import read_report
from support.stack import BASE_IMAGE, REGISTRY
from triton_release.cache import configure
from triton_release.cli.main import main
from triton_release.image.base import inspect
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.integration


@pytest.fixture
def registry_base(docker_client, unique):
    """The stack's base under a name of this test's in the registry, and not on the daemon (the
    test's tag removed after its push; the stack's own tag is never touched)."""
    name = f"{REGISTRY}/triton-release-test/base-pull-{unique}:24.10-py3"
    docker_client.images.get(BASE_IMAGE).tag(name)
    for _ in docker_client.api.push(name, stream=True, decode=True):
        pass
    docker_client.images.remove(name)  # the tag only: the stack's image keeps its layers
    yield name
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker_client.images.remove(name)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    git_repo = GitRepo(tmp_path / "work")
    git_repo.write(python_model_files("a"))
    git_repo.commit("one model")
    monkeypatch.chdir(git_repo.root)
    return git_repo


def release(tmp_path, target: str, base: str) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    code = main(["release", "--to", target, "--base-image", base, "--report", str(report)])
    return code, read_report(report)


@pytest.mark.parametrize("cached", [False, True], ids=["empty cache", "its inspection cached"])
def test_a_base_only_in_the_registry_is_pulled_beside_the_first_steps(
    tmp_path, checkout, registry_base, docker_client, unique, monkeypatch, cached
):
    """With an empty cache the environments wait for the pull (they inspect the base); with the
    inspection of the image the registry names in the cache, they are resolved beside it, and the
    pull is waited for before the build."""
    monkeypatch.setenv("TRITON_RELEASE_CACHE", str(tmp_path / "cache"))
    if cached:  # the stand-in's inspection, under its id: the id of the image the registry holds
        configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
        inspect(docker_client, BASE_IMAGE)
    target = f"{REGISTRY}/triton-release-test/base-pull-release-{unique}-{int(cached)}"
    try:
        code, report = release(tmp_path, target, registry_base)
        assert code == 0, report.get("error")
        steps = list(report["steps"])
        if cached:
            assert steps.index("export") < steps.index("environments") < steps.index("pull") < steps.index("build")
        else:
            assert steps.index("export") < steps.index("pull") < steps.index("environments") < steps.index("build")
        assert report["steps"]["pull"]["image"] == registry_base
        assert report["steps"]["pull"]["image_id"] == docker_client.images.get(registry_base).id
        assert RegistryRepository.parse(target).digest("1.0.0")
    finally:
        for tag in ("candidate", "1.0.0"):
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(f"{target}:{tag}", force=True)


def test_a_base_the_registry_does_not_hold_is_refused_naming_it_and_the_tree_is_left_as_it_was(
    tmp_path, checkout, unique
):
    missing = f"{REGISTRY}/triton-release-test/base-pull-missing-{unique}:24.10-py3"
    code, report = release(tmp_path, f"{REGISTRY}/triton-release-test/base-pull-none-{unique}", missing)
    assert code == 1
    assert missing in report["error"]["message"] and "registry answered" in report["error"]["message"]
    assert "build" not in report["steps"] and report["steps"]["pull"]["ok"] is False
    assert checkout.git("status", "--porcelain") == ""
