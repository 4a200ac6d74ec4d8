"""`stage` and `test` of a candidate on the real stack: the candidate pushed under
candidate-<sha12> with its plan as labels, reused by a rerun of the same commit, pulled by digest
and tested shard by shard, each shard's record written to the registry."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tarfile

import pytest

from support.models import python_model_files
from support.reports import read_report
from support.stack import BASE_IMAGE, REGISTRY
from triton_release import contract
from triton_release.cli.main import main
from triton_release.errors import Refused
from triton_release.models.shards import shards_from_label
from triton_release.registry.candidate import check_candidate
from triton_release.registry.candidate.shard_results import read_shard_result
from triton_release.registry.client import RegistryRepository

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
        return code, read_report(report)

    try:
        code, report = run("stage", "--to", target, "--base-image", BASE_IMAGE, "--shards", "2")
        assert code == 0, report.get("error")
        yield git_repo, head, RegistryRepository.parse(target), report, run
    finally:
        removed(docker_client, target)


def removed(docker_client, target: str) -> None:
    """Remove the local images of `target` and every manifest its registry tags name (the tags go too)."""
    for image in docker_client.images.list(name=target):
        docker_client.images.remove(image.id, force=True)
    with contextlib.suppress(Exception):
        docker_client.images.remove(f"{target}:candidate", force=True)
    registry = RegistryRepository.parse(target)
    for digest in {registry.digest(tag) for tag in registry.tags()} - {None}:
        registry.delete(digest)


def test_stage_pushes_a_candidate_with_its_plan_and_no_release_tag(staged):
    git_repo, head, repo, report, _ = staged
    digest = repo.digest(f"candidate-{head[:12]}")
    assert repo.tags() == [f"candidate-{head[:12]}", contract.evidence_tag(digest)]  # no X.Y.Z, no channel
    assert [s["predicate_type"] for s in report["steps"]["evidence"]["statements"]] == [
        "https://slsa.dev/provenance/v1",
        "https://cyclonedx.org/bom",
    ]  # promote adds the golden results
    assert report["candidate"] == f"{repo}@{digest}"
    assert report["version"] == "1.0.0" and report["released"] is False
    assert report["shards"] == [
        {"name": "shard-1", "models": "a", "load": "a", "cases": 1, "gpu": False},
        {"name": "shard-2", "models": "b", "load": "b", "cases": 1, "gpu": False},
    ]
    assert list(report["steps"]) == [
        "validate",
        "changed",
        "reuse",
        "export",
        "environments",
        "shards",
        "build",
        "candidate",
        "evidence",
    ]
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
    assert repo.tags() == [f"candidate-{head[:12]}", contract.evidence_tag(repo.digest(f"candidate-{head[:12]}"))]


def test_each_shard_is_tested_by_digest_and_its_record_written(staged, docker_client):
    _, head, repo, report, run = staged
    candidate = report["candidate"]
    digest = candidate.split("@", 1)[1]
    docker_client.images.remove(candidate, force=True)  # as on a fresh runner: pulled by digest
    code, tested = run("test", "--image", candidate, "--shard", "shard-2")
    assert code == 0, tested.get("error")
    assert list(tested["steps"]) == ["pull", "test", "golden-record"]
    assert [c["case"] for c in tested["steps"]["test"]["cases"]] == ["b/basic"]  # the shard's models only
    record = read_shard_result(repo, digest, "shard-2")
    assert record is not None and record.passed and record.models == ("b",) and record.revision == head
    assert record.cases == ({"case": "b/basic", "passed": True},)
    assert read_shard_result(repo, digest, "shard-1") is None
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
        candidate = read_report(report_path)["candidate"]
        code = main(["test", "--image", candidate, "--shard", "shard-1", "--report", str(report_path)])
        tested = read_report(report_path)
        assert code == 1 and "golden cases failed" in tested["error"]["message"]
        assert tested["steps"]["golden-record"]["passed"] is False
        record = read_shard_result(RegistryRepository.parse(target), candidate.split("@", 1)[1], "shard-1")
        assert record is not None and not record.passed and record.cases == ({"case": "a/basic", "passed": False},)
    finally:
        removed(docker_client, target)


def test_a_digest_the_registry_does_not_have_is_refused(staged):
    _, _, repo, _, run = staged
    code, tested = run("test", "--image", f"{repo}@sha256:{'0' * 64}", "--shard", "shard-1")
    assert code == 1 and "is not in the registry" in tested["error"]["message"]
    assert "test" not in tested["steps"]


# -- a shard that tested less than its plan never promotes (issue 26, item 4) ------------------


def test_a_shard_run_from_a_checkout_without_the_golden_folders_records_a_failure(staged, tmp_path):
    git_repo, _, repo, report, run = staged
    bare = tmp_path / "no-golden" / "model_repository"  # not a git checkout: its files are taken as they are
    shutil.copytree(git_repo.models, bare, ignore=shutil.ignore_patterns("golden"))
    digest = report["candidate"].split("@", 1)[1]
    code, tested = run("test", "--image", report["candidate"], "--shard", "shard-1", "--model-repository", str(bare))
    assert code == 1, tested.get("error")
    assert "ran 0 of 1 planned golden cases of a (0 of 1)" in tested["error"]["message"]
    assert "fetch-depth: 0" in tested["error"]["message"]
    record = read_shard_result(repo, digest, "shard-1")
    assert record is not None and not record.passed and record.cases == ()
    assert record.planned_cases == (("a", 1),) and "0 of 1" in record.reason
    assert run("test", "--image", report["candidate"], "--shard", "shard-2")[0] == 0
    code, promoted = run("promote", "--candidate", report["candidate"], "--version", "1.0.0")
    assert code == 1 and "shard-1 failed: ran 0 of 1 planned golden cases of a (0 of 1)" in promoted["error"]["message"]
    assert [t for t in repo.tags() if not t.startswith(("candidate-", "sha256-"))] == []  # nothing released


GPU_ONLY_MODEL = """\
class TritonPythonModel:
    def initialize(self, args):
        if args["model_instance_kind"] != "GPU":
            raise RuntimeError("CUDA is required")

    def execute(self, requests):
        return []
"""


def test_a_gpu_only_shard_tested_on_a_cpu_runner_is_refused_by_promote_naming_the_model(
    git_repo, unique, tmp_path, monkeypatch, docker_client
):
    files = {**python_model_files("a"), **python_model_files("gpuonly")}
    files["gpuonly/config.pbtxt"] += "instance_group [ { kind: KIND_GPU count: 1 } ]\n"
    files["gpuonly/1/model.py"] = GPU_ONLY_MODEL
    git_repo.write(files)
    git_repo.commit("a, and a model that runs on a GPU only")
    monkeypatch.chdir(git_repo.root)
    target = f"{REGISTRY}/triton-release-test/gpu-shard-{unique}-{tmp_path.name[-12:].lower().strip('_')}"
    report_path = tmp_path / "report.json"

    def run(*argv: str) -> tuple[int, dict]:
        code = main([*argv, "--report", str(report_path)])
        return code, read_report(report_path)

    try:
        code, staged = run("stage", "--to", target, "--base-image", BASE_IMAGE, "--shards", "2")
        assert code == 0, staged.get("error")
        assert [(s["name"], s["models"], s["gpu"]) for s in staged["shards"]] == [
            ("shard-1", "a", False),
            ("shard-2", "gpuonly", True),
        ]
        candidate = staged["candidate"]
        digest = candidate.split("@", 1)[1]
        assert run("test", "--image", candidate, "--shard", "shard-1")[0] == 0
        code, tested = run("test", "--image", candidate, "--shard", "shard-2")  # gpu_models test: set aside
        assert code == 0, tested.get("error")
        record = read_shard_result(RegistryRepository.parse(target), digest, "shard-2")
        assert record.passed and record.cases == () and record.planned_cases == (("gpuonly", 1),)
        assert [name for name, _ in record.needs_gpu] == ["gpuonly"] and "CUDA is required" in record.needs_gpu[0][1]
        code, promoted = run("promote", "--candidate", candidate, "--version", "1.0.0")
        message = promoted["error"]["message"]
        assert code == 1 and "shard-2 left gpuonly (needs a GPU: " in message
        assert "ran 0 of 1 planned golden case) untested" in message and "--gpus all" in message
        assert [t for t in RegistryRepository.parse(target).tags() if not t.startswith(("candidate-", "sha256-"))] == []
        # an explicit policy accepts it, naming what ships untested
        accepted = check_candidate(RegistryRepository.parse(target), digest, "1.0.0", gpu_models="test")
        assert [name for name, _ in accepted.untested] == ["gpuonly"]
        assert "gpuonly" in accepted.to_json()["shipped_untested"]
        with pytest.raises(Refused, match="gpuonly"):
            check_candidate(RegistryRepository.parse(target), digest, "1.0.0")
    finally:
        removed(docker_client, target)


# -- a re-stage with other build inputs builds again (issue 26, item 5) -------------------------


def stub_311(docker_client, folder) -> str:
    """The Python 3.11 stub of the stand-in base image, copied out of it (whatever the stack's
    own folder holds on this machine)."""
    container = docker_client.containers.create(BASE_IMAGE, command=["true"], entrypoint=[])
    try:
        stream, _ = container.get_archive("/opt/tritonserver/backends/python/triton_python_backend_stub")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            tar.extract("triton_python_backend_stub", folder)
    finally:
        container.remove(force=True)
    return str(folder / "triton_python_backend_stub")


def test_a_restage_with_another_base_image_builds_again_and_moves_the_candidate_tag(
    staged, capfd, docker_client, tmp_path
):
    stub = stub_311(docker_client, tmp_path)
    _, head, repo, first, run = staged
    made = [first["candidate"]]
    try:
        code, other = run(
            "stage",
            "--to",
            str(repo),
            "--base-image",
            "local/tritonserver:24.10-py3-stub38",
            "--stub",
            f"path:{stub}",
            "--shards",
            "2",
        )
        assert code == 0, other.get("error")
        made.append(other["candidate"])
        assert "reused" not in other["steps"]["reuse"] and "build" in other["steps"]
        assert other["steps"]["candidate"]["reused"] is False and other["candidate"] != first["candidate"]
        assert "other build inputs (base_image_id " in "".join(capfd.readouterr())
        code, back = run("stage", "--to", str(repo), "--base-image", BASE_IMAGE, "--shards", "2")
        assert code == 0, back.get("error")
        made.append(back["candidate"])
        assert "build" in back["steps"] and back["candidate"] != other["candidate"]  # not the stub38 candidate
        assert repo.digest(f"candidate-{head[:12]}") == back["candidate"].split("@", 1)[1]
        built_from = json.loads(
            repo.image_config(back["candidate"].split("@", 1)[1])["config"]["Labels"]["triton-release.build-inputs"]
        )
        assert (built_from["stub"], built_from["max_layers"]) == ("auto", 120)
        code, again = run("stage", "--to", str(repo), "--base-image", BASE_IMAGE, "--shards", "2")
        assert code == 0 and again["steps"]["reuse"]["reused"] is True and again["candidate"] == back["candidate"]
    finally:  # the candidates the tag moved away from are untagged: deleted by digest
        for ref in made:
            repo.delete(ref.split("@", 1)[1])
