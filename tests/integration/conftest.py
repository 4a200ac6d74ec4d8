"""Integration fixtures on the real stack (the stack fixture itself is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from triton_release.image.build import build_image
from triton_release.models.repository import Repository

from support.stack import BASE_IMAGE, ROOT


@pytest.fixture(scope="session")
def example_image(docker_client, unique):
    """The bundled example repository built once on the bookworm stand-in."""
    tag = f"triton-release-test/example:{unique}"
    result = build_image(Repository.load(ROOT / "model_repository"), BASE_IMAGE, tag, client=docker_client)
    yield result
    docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="session")
def tool_image(docker_client):
    """The action's image (the repository's Dockerfile), as a GitHub runner or act builds it."""
    tag = "triton-release-test/tool:latest"  # kept: the next run reuses its dependency layer
    docker_client.images.build(path=str(ROOT), tag=tag, rm=True, forcerm=True, pull=False)
    return tag
