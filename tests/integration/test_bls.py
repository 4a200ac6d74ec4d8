"""A model calling another (BLS) in the real tritonserver: its callee is loaded with it."""

from __future__ import annotations

import pytest

from support.bls import aliased_caller_files, helped_caller_files
from support.models import bls_caller_files, python_model_files
from support.stack import built_image
from triton_release import steps
from triton_release.models.repository import Repository
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration


def test_a_caller_is_tested_with_its_callee_loaded(docker_client, make_repo, unique):
    repo = Repository.load(
        make_repo(
            {**bls_caller_files("caller", "callee"), **python_model_files("callee"), **python_model_files("alone")}
        )
    )
    with built_image(docker_client, repo, f"trt-bls/calls:{unique}") as tag:
        run = steps.test(repo, tag, ["caller"], server_options=ServerOptions(load_timeout=60))
    assert run.passed and [c.case for c in run.cases] == ["caller/basic"]
    assert set(run.loaded) == {"caller", "callee"}


def test_callers_through_a_helper_module_and_an_alias_are_tested_with_their_callee(docker_client, make_repo, unique):
    """The call made in helpers.py (a partial of an alias) and the one through `InferenceRequest as IR`
    both load the callee: without it loaded, tritonserver answers their cases with an error."""
    repo = Repository.load(
        make_repo(
            {
                **helped_caller_files("helped", "callee"),
                **aliased_caller_files("aliased", "callee"),
                **python_model_files("callee"),
            }
        )
    )
    with built_image(docker_client, repo, f"trt-bls/followed:{unique}") as tag:
        run = steps.test(repo, tag, ["aliased", "helped"], server_options=ServerOptions(load_timeout=60))
    assert run.passed, [c.to_json() for c in run.failed]
    assert sorted(c.case for c in run.cases) == ["aliased/basic", "helped/basic"]
    assert set(run.loaded) == {"aliased", "helped", "callee"}
