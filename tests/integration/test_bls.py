"""A model calling another (BLS) in the real tritonserver: its callee is loaded with it."""

from __future__ import annotations

import pytest

from support.models import bls_caller_files, python_model_files
from support.stack import built_image
from triton_release import steps
from triton_release.models.repository import Repository

pytestmark = pytest.mark.integration


def test_a_caller_is_tested_with_its_callee_loaded(docker_client, make_repo, unique):
    repo = Repository.load(make_repo({**bls_caller_files("caller", "callee"), **python_model_files("callee"),
                                      **python_model_files("alone")}))
    with built_image(docker_client, repo, f"trt-bls/calls:{unique}") as tag:
        run = steps.test(repo, tag, ["caller"], load_timeout=60)
    assert run.passed and [c.case for c in run.cases] == ["caller/basic"]
    assert set(run.loaded) == {"caller", "callee"}
