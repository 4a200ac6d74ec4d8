"""The project root and the names of the local stack (`make stack`): its base image and registry."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from triton_release.contract import PROBE_LABEL, RUN_ID_VARIABLE, SERVER_LABEL

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "local/tritonserver:24.10-py3"
REGISTRY = "127.0.0.1:5000"
# This test run's server containers (and those of the CLI processes it starts) carry this label:
# a run counts and removes its own, never those of a benchmark or another run on the daemon.
# On two workers (make test), each worker's servers carry a label of their own.
RUN_ID = os.environ.setdefault(RUN_ID_VARIABLE, f"tests-{uuid.uuid4().hex[:12]}")
if (worker := os.environ.get("PYTEST_XDIST_WORKER")) and not RUN_ID.endswith(f"-{worker}"):
    RUN_ID = os.environ[RUN_ID_VARIABLE] = f"{RUN_ID}-{worker}"
SERVERS = f"{SERVER_LABEL}={RUN_ID}"
PROBES = f"{PROBE_LABEL}={RUN_ID}"
# perf_analyzer as `make stack` installs it (stack/stack.py): the latency gate's tests name it
PERF_ANALYZER = ROOT / ".stack" / "perf_analyzer" / "bin" / "perf_analyzer"


@contextmanager
def built_image(docker_client, repo, tag: str) -> Iterator[str]:
    """`repo` built on the stand-in base as `tag`, removed afterwards."""
    from triton_release.image.build import build_image

    build_image(repo, BASE_IMAGE, tag, client=docker_client)
    try:
        yield tag
    finally:
        docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="module", name="image")
def repo_image(docker_client, repo, unique, request) -> Iterator[str]:
    """`image`: the test module's own `repo` fixture built once for the module, removed after it.
    tests/integration/conftest.py and tests/faults/conftest.py offer it; a module with an `image`
    of its own overrides it."""
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    with built_image(docker_client, repo, f"triton-release-test/{name}:{unique}") as tag:
        yield tag
