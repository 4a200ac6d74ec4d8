"""Fault suite fixtures: one released workspace per module (support/workspace.py), reset after
every case."""

from __future__ import annotations

import pytest

from support.stack import REGISTRY, repo_image  # noqa: F401 - repo_image: the fixture `image`
from support.workspace import Workspace


@pytest.fixture(scope="module")
def module_workspace(docker_client, tmp_path_factory, unique, request):
    name = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    return Workspace(
        tmp_path_factory.mktemp("faults") / "work", f"{REGISTRY}/triton-release-faults/{name}-{unique}", docker_client
    )


@pytest.fixture
def ws(module_workspace):
    module_workspace.reset()
    yield module_workspace
    module_workspace.reset()
