"""Fault suite fixtures: two models released once per worker (`released_once`), which each module
branches from into a workspace of its own (support/workspace.py), reset after every case."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from support.stack import REGISTRY, repo_image  # noqa: F401 - repo_image: the fixture `image`
from support.workspace import Workspace


@pytest.fixture(scope="session")
def released_once(docker_client, tmp_path_factory):
    """Two models released once as 1.0.0 on this worker, for every module and test here to branch from."""
    root = tmp_path_factory.mktemp("faults-template") / "work"
    ws = Workspace(root, f"{REGISTRY}/triton-release-faults/template-{uuid.uuid4().hex[:10]}", docker_client)
    yield ws
    for tag in ("candidate", "1.0.0"):  # the build's tag, and the one the daemon's push of 1.0.0 left
        with contextlib.suppress(Exception):
            docker_client.images.remove(f"{ws.image}:{tag}", force=True)


@pytest.fixture(scope="module")
def module_workspace(docker_client, tmp_path_factory, unique, request, released_once):
    """A copy of `released_once`'s checkout and releases in a registry repository of the module's own."""
    name = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    ws = Workspace(
        tmp_path_factory.mktemp("faults") / "work",
        f"{REGISTRY}/triton-release-faults/{name}-{unique}",
        docker_client,
        branched_from=released_once,
    )
    yield ws
    with contextlib.suppress(Exception):
        docker_client.images.remove(f"{ws.image}:candidate", force=True)


@pytest.fixture
def ws(module_workspace):
    module_workspace.reset()
    yield module_workspace
    module_workspace.reset()
