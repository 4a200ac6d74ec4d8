"""The README's main command, as a user types it."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest

from support.stack import ROOT
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.e2e


def test_make_demo_releases_the_example_into_the_local_registry(stack, tmp_path):
    demo = tmp_path / "demo"  # a new scratch repository: a full release every time
    # and a registry repository of its own: releases of another git repository are refused there
    target = f"127.0.0.1:5000/triton-release-demo/models-{uuid.uuid4().hex[:12]}"
    result = subprocess.run(
        ["make", "demo", f"DEMO_DIR={demo}", f"DEMO_REPO={target}"], cwd=ROOT, capture_output=True, text=True
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    for step in ("validate", "changed", "bump", "build", "test", "push", "commit"):
        assert f"{step}: done in" in out
    assert out.count("PASS ") == 10
    version = re.search(rf"pushed {re.escape(target)}:(\d+\.\d+\.\d+)", out).group(1)
    tags = RegistryRepository.parse(target).tags()
    assert version in tags and "latest" in tags
    assert subprocess.run(["git", "tag"], cwd=demo, capture_output=True, text=True).stdout.strip() == f"v{version}"
    for found in stack.images.list(name=target):
        stack.images.remove(found.id, force=True)
