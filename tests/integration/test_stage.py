"""`stage` and `test` of a candidate on the real stack: the candidate pushed under
candidate-<sha12> with its plan as labels, reused by a rerun of the same commit, pulled by digest
and tested shard by shard, each shard's record written to the registry."""

from __future__ import annotations

import json

import pytest

from triton_release.cli.main import main
from triton_release.models.shards import shards_from_label
from triton_release.registry.client import RegistryRepository
from triton_release.registry.records import read_record

from support.models import python_model_files
from support.stack import BASE_IMAGE, REGISTRY

pytestmark = pytest.mark.integration


@pytest.fixture
def staged(git_repo, unique, tmp_path, monkeypatch, docker_client):
    """Two models committed, staged as two shards (a first release: every model changed)."""
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    head = git_repo.commit("two models")
    monkeypatch.chdir(git_repo.root)
    target = f"{REGISTRY}/triton-release-test/stage-{unique}-{tmp_path.name[-12:].lower().strip('_')}"

    def run(*argv: str) -> tuple[int, dict]:
        report = tmp_path / "report.json"
        report.unlink(missing_ok=True)
        code = main([*argv, "--report", str(report)])
        return code, json.loads(report.read_text())

    code, report = run("stage", "--to", target, "--base-image", BASE_IMAGE, "--shards", "2")
    assert code == 0, report.get("error")
    yield git_repo, head, RegistryRepository.parse(target), report, run
    docker_client.images.remove(f"{target}:candidate", force=True)
    for image in docker_client.images.list(name=target):
        docker_client.images.remove(image.id, force=True)


def test_stage_pushes_a_candidate_with_its_plan_and_no_release_tag(staged):
    git_repo, head, repo, report, _ = staged
    assert repo.tags() == [f"candidate-{head[:12]}"]  # no X.Y.Z, no channel, nothing else
    digest = repo.digest(f"candidate-{head[:12]}")
    assert report["candidate"] == f"{repo}@{digest}"
    assert report["version"] == "1.0.0" and report["released"] is False
    assert report["shards"] == [
        {"name": "shard-1", "models": "a", "load": "a", "cases": 1, "gpu": False},
        {"name": "shard-2", "models": "b", "load": "b", "cases": 1, "gpu": False}]
    assert list(report["steps"]) == ["validate", "changed", "reuse", "export", "environments", "shards", "build",
                                    "candidate"]
    labels = repo.image_config(digest)["config"]["Labels"]
    assert [s.models for s in shards_from_label(labels["triton-release.shards"])] == [("a",), ("b",)]
    assert json.loads(labels["triton-release.changed"]) == ["a", "b"]
    assert labels["org.opencontainers.image.version"] == "1.0.0"
    assert labels["org.opencontainers.image.revision"] == head
    assert git_repo.git("status", "--porcelain") == ""  # the working tree is never bumped


def test_staging_the_same_commit_again_reuses_the_candidate(staged):
    _, head, repo, first, run = staged
    code, again = run("stage", "--to", str(repo), "--base-image", BASE_IMAGE, "--shards", "2")
    assert code == 0, again.get("error")
    assert again["candidate"] == first["candidate"] and again["shards"] == first["shards"]
    assert again["steps"]["reuse"]["reused"] is True
    assert "build" not in again["steps"] and "candidate" not in again["steps"]
    assert repo.tags() == [f"candidate-{head[:12]}"]


def test_each_shard_is_tested_by_digest_and_its_record_written(staged, docker_client):
    _, head, repo, report, run = staged
    candidate = report["candidate"]
    digest = candidate.split("@", 1)[1]
    docker_client.images.remove(candidate, force=True)  # as on a fresh runner: pulled by digest
    code, tested = run("test", "--image", candidate, "--shard", "shard-2")
    assert code == 0, tested.get("error")
    assert list(tested["steps"]) == ["pull", "test", "golden-record"]
    assert [c["case"] for c in tested["steps"]["test"]["cases"]] == ["b/basic"]  # the shard's models only
    record = read_record(repo, digest, "shard-2")
    assert record is not None and record.passed and record.models == ("b",) and record.revision == head
    assert record.cases == ({"case": "b/basic", "passed": True},)
    assert read_record(repo, digest, "shard-1") is None
    assert f"sha256-{digest.split(':')[1]}.golden-shard-2" in repo.tags()


def test_a_candidate_is_held_to_the_golden_cases_of_its_own_commit(staged):
    git_repo, _, _, report, run = staged
    case = git_repo.models / "a" / "golden" / "basic.json"
    data = json.loads(case.read_text())
    data["outputs"][0]["data"][0] = 99
    case.write_text(json.dumps(data))
    git_repo.commit("a: a wrong expected value, after the candidate was staged")
    code, tested = run("test", "--image", report["candidate"], "--shard", "shard-1")
    assert code == 0, tested.get("error")
    assert [c["case"] for c in tested["steps"]["test"]["cases"]] == ["a/basic"]


def test_a_wrong_answer_records_a_failed_shard(git_repo, unique, tmp_path, monkeypatch, docker_client):
    git_repo.write({**python_model_files("a")})
    case = git_repo.models / "a" / "golden" / "basic.json"
    data = json.loads(case.read_text())
    data["outputs"][0]["data"][0] = 99
    case.write_text(json.dumps(data))
    git_repo.commit("a with a wrong expected value")
    monkeypatch.chdir(git_repo.root)
    target = f"{REGISTRY}/triton-release-test/stage-{unique}-{tmp_path.name[-12:].lower().strip('_')}"
    report_path = tmp_path / "report.json"
    try:
        assert main(["stage", "--to", target, "--base-image", BASE_IMAGE, "--report", str(report_path)]) == 0
        candidate = json.loads(report_path.read_text())["candidate"]
        code = main(["test", "--image", candidate, "--shard", "shard-1", "--report", str(report_path)])
        tested = json.loads(report_path.read_text())
        assert code == 1 and "golden cases failed" in tested["error"]["message"]
        assert tested["steps"]["golden-record"]["passed"] is False
        record = read_record(RegistryRepository.parse(target), candidate.split("@", 1)[1], "shard-1")
        assert record is not None and not record.passed and record.cases == ({"case": "a/basic", "passed": False},)
    finally:
        for image in docker_client.images.list(name=target):
            docker_client.images.remove(image.id, force=True)


def test_a_digest_the_registry_does_not_have_is_refused(staged):
    _, _, repo, _, run = staged
    code, tested = run("test", "--image", f"{repo}@sha256:{'0' * 64}", "--shard", "shard-1")
    assert code == 1 and "is not in the registry" in tested["error"]["message"]
    assert "test" not in tested["steps"]
