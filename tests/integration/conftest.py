"""Integration fixtures on the real stack (the stack fixture itself is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from triton_release.image import build_image
from triton_release.repository import Repository

from helpers import BASE_IMAGE, ROOT


@pytest.fixture(scope="session")
def example_image(docker_client, unique):
    """The bundled example repository built once on the bookworm stand-in."""
    tag = f"triton-release-test/example:{unique}"
    result = build_image(Repository.load(ROOT / "model_repository"), BASE_IMAGE, tag, client=docker_client)
    yield result
    docker_client.images.remove(tag, force=True)
