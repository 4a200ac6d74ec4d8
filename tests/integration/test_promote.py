"""Golden records and `promote` against the real registry: candidates built on the stand-in base,
labelled with a plan of two shards and pushed under candidate-<sha12> through the Docker daemon."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from support.models import python_model_files, write_tree
from support.reports import read_report
from support.stack import REGISTRY, built_image
from triton_release.cli.main import main
from triton_release.contract import CHANGED_LABEL, SHARDS_LABEL, candidate_tag, evidence_tag, shard_result_tag
from triton_release.errors import Refused
from triton_release.image.build import relabel
from triton_release.models.repository import Repository
from triton_release.models.shards import Shard, shards_label
from triton_release.registry.candidate.shard_results import (
    OCI_MANIFEST,
    SHARD_RESULT_TYPE,
    ShardResult,
    read_shard_result,
    write_shard_result,
)
from triton_release.registry.client import Manifest, RegistryRepository

pytestmark = pytest.mark.integration

PLAN = [Shard("shard-1", ("a",), ("a",), 1, False, (1,)), Shard("shard-2", ("b",), ("b",), 1, False, (1,))]
JUNIT = b'<?xml version="1.0"?><testsuites><testsuite name="golden" tests="1" failures="0"/></testsuites>'


@pytest.fixture(scope="module")
def tiny_image(docker_client, tmp_path_factory, unique):
    root = write_tree(
        tmp_path_factory.mktemp("promote") / "model_repository", {**python_model_files("a"), **python_model_files("b")}
    )
    with built_image(docker_client, Repository.load(root), f"triton-release-test/promote:{unique}") as tag:
        yield tag


class Stage:
    """Candidates of one registry repository: `candidate(...)` labels the tiny image as a stage
    would, pushes it under candidate-<sha12> and returns its digest."""

    def __init__(self, docker_client, image: str, repository: str) -> None:
        self.client, self.image = docker_client, image
        self.registry = RegistryRepository.parse(repository)
        self.local: list[str] = []

    def candidate(
        self, version: str, *, revision: str | None = None, base: str = "", created: str = "2026-06-01T12:00:00Z"
    ) -> tuple[str, str]:
        revision = revision or uuid.uuid4().hex + uuid.uuid4().hex[:8]
        tag = candidate_tag(revision)
        labels = {
            SHARDS_LABEL: shards_label(PLAN),
            CHANGED_LABEL: json.dumps(["a", "b"]),
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.revision": revision,
            "org.opencontainers.image.created": created,
            "triton-release.base": base,
        }
        relabel(self.image, labels, f"{self.registry}:{tag}", self.client)
        self.local.append(f"{self.registry}:{tag}")
        for event in self.client.api.push(str(self.registry), tag=tag, stream=True, decode=True):
            assert "error" not in event, event
        return self.registry.digest(tag), revision

    def record(
        self,
        digest: str,
        shard: str,
        passed: bool = True,
        failed: tuple[str, ...] = (),
        models: tuple[str, ...] | None = None,
        revision: str = "",
    ) -> str:
        models = models or next(s.models for s in PLAN if s.name == shard)
        cases = tuple({"case": f"{m}/basic", "passed": f"{m}/basic" not in failed} for m in models)
        return write_shard_result(self.registry, ShardResult(digest, shard, models, passed, cases, revision), JUNIT)

    def promote(self, digest: str, version: str, *flags: str, report) -> tuple[int, dict]:
        code = main(
            [
                "promote",
                "--candidate",
                f"{self.registry}@{digest}",
                "--version",
                version,
                "--report",
                str(report),
                *flags,
            ]
        )
        return code, read_report(report)

    def cleanup(self) -> None:
        for tag in self.local:
            self.client.images.remove(tag, force=True)


@pytest.fixture
def stage(docker_client, tiny_image, request):
    name = request.node.name[5:40].replace("_", "-").strip("-")
    made = Stage(docker_client, tiny_image, f"{REGISTRY}/triton-release-test/{name}-{uuid.uuid4().hex[:8]}")
    yield made
    made.cleanup()


def test_a_record_is_an_oci_artifact_beside_the_candidate(stage):
    digest, revision = stage.candidate("1.0.0")
    tag = stage.record(digest, "shard-1", passed=False, failed=("a/basic",), revision=revision)
    assert tag == shard_result_tag(digest, "shard-1")
    manifest = json.loads(stage.registry.manifest(tag).body)
    assert manifest["mediaType"] == OCI_MANIFEST and manifest["artifactType"] == SHARD_RESULT_TYPE
    assert manifest["config"]["mediaType"] == SHARD_RESULT_TYPE
    assert [layer["mediaType"] for layer in manifest["layers"]] == ["application/xml"]
    assert stage.registry.blob(manifest["layers"][0]["digest"]) == JUNIT
    found = read_shard_result(stage.registry, digest, "shard-1")
    assert found == ShardResult(digest, "shard-1", ("a",), False, ({"case": "a/basic", "passed": False},), revision)
    assert read_shard_result(stage.registry, digest, "shard-2") is None
    # written again (a rerun of the shard): replaced, and the blobs already there are not sent again
    assert stage.registry.put_blob(JUNIT) == manifest["layers"][0]["digest"]
    stage.record(digest, "shard-1", revision=revision)
    assert read_shard_result(stage.registry, digest, "shard-1").passed
    # something else under a record's tag is refused, naming the tag
    stage.registry.put_manifest(shard_result_tag(digest, "shard-2"), stage.registry.manifest(digest))
    with pytest.raises(Refused, match=shard_result_tag(digest, "shard-2")):
        read_shard_result(stage.registry, digest, "shard-2")


def test_promote_refuses_a_missing_a_foreign_and_a_failed_record(stage, tmp_path):
    digest, _ = stage.candidate("1.0.0")
    stage.record(digest, "shard-1")
    code, report = stage.promote(digest, "1.0.0", report=tmp_path / "r.json")
    assert code == 1 and "no record for shard-2" in report["error"]["message"]
    assert report["steps"]["records"]["shards"][1] == {
        "name": "shard-2",
        "models": ["b"],
        "found": False,
        "passed": False,
        "failed_cases": [],
        "record": shard_result_tag(digest, "shard-2"),
        "cases_planned": 1,
        "cases_run": 0,
    }

    other, _ = stage.candidate("1.0.0")
    stage.registry.put_manifest(
        shard_result_tag(digest, "shard-2"), stage.registry.manifest(stage.record(other, "shard-2"))
    )
    code, report = stage.promote(digest, "1.0.0", report=tmp_path / "r.json")
    assert code == 1 and f"the record of shard-2 is for {other}, another candidate" in report["error"]["message"]

    stage.record(digest, "shard-2", passed=False, failed=("b/basic",))
    code, report = stage.promote(digest, "1.0.0", report=tmp_path / "r.json")
    assert code == 1 and "shard-2 failed: b/basic" in report["error"]["message"]

    stage.record(digest, "shard-2")
    code, report = stage.promote(digest, "1.0.1", report=tmp_path / "r.json")
    assert code == 1 and "not the candidate's planned version 1.0.0" in report["error"]["message"]
    assert [t for t in stage.registry.tags() if not t.startswith(("candidate-", "sha256-"))] == []


def test_promote_tags_the_candidate_and_never_overwrites_a_release(stage, tmp_path):
    digest, revision = stage.candidate("1.0.0")
    for shard in ("shard-1", "shard-2"):
        stage.record(digest, shard)
    code, report = stage.promote(digest, "1.0.0", "--channel", "stable", report=tmp_path / "r.json")
    assert code == 0, report.get("error")
    tags = ["1.0.0", "1.0", "1", f"sha-{revision[:12]}", "stable"]
    assert report["steps"]["promote"]["tags"] == tags
    assert {stage.registry.digest(t) for t in tags} == {digest}
    assert (report["version"], report["digest"], report["released"]) == ("1.0.0", digest, True)
    evidence = report["steps"]["evidence"]  # the shards' golden results (beside what a stage attached: none here)
    assert [s["predicate_type"] for s in evidence["statements"]] == [
        "https://triton-release.dev/golden/v1",
        "https://in-toto.io/attestation/test-result/v0.1",
    ]
    assert evidence["golden_passed"] is True and evidence["digest"] == digest
    layer = stage.registry.manifest(evidence_tag(digest)).layers[1]
    tests = json.loads(base64.b64decode(json.loads(stage.registry.blob(layer["digest"]))["payload"]))
    assert tests["subject"][0]["digest"] == {"sha256": digest.split(":")[1]}
    # each shard's cases by name; no checkout here (no --commit), so no case file's blob
    assert tests["predicate"]["result"] == "pass" and tests["predicate"]["configuration"] == []
    assert tests["predicate"]["passedTests"] == sorted(f"{m}/basic" for s in PLAN for m in s.models)

    rival, _ = stage.candidate("1.0.0")
    for shard in ("shard-1", "shard-2"):
        stage.record(rival, shard)
    code, report = stage.promote(rival, "1.0.0", "--channel", "stable", report=tmp_path / "r.json")
    assert code == 1 and "already exists" in report["error"]["message"]
    assert stage.registry.digest("1.0.0") == stage.registry.digest("stable") == digest

    # the same promote again (a rerun after a stop): the tags are finished, nothing else happens
    stage.registry.put_manifest("stable", stage.registry.manifest(rival))
    code, report = stage.promote(digest, "1.0.0", "--channel", "stable", report=tmp_path / "r.json")
    assert code == 0 and report["steps"]["promote"]["resumed"] is True
    assert stage.registry.digest("stable") == digest


def test_promote_commit_redoes_the_bump_commits_and_tags(stage, git_repo, tmp_path, monkeypatch):
    git_repo.write(python_model_files("a"))
    base = git_repo.commit("first")
    changed = (git_repo.models / "a" / "1" / "model.py").read_text().replace("x + 1", "x + 2")
    git_repo.write({"a/1/model.py": changed})
    head = git_repo.commit("a adds 2")
    digest, _ = stage.candidate("1.1.0", revision=head, base=base)
    for shard in ("shard-1", "shard-2"):
        stage.record(digest, shard)
    monkeypatch.chdir(git_repo.root)
    code, report = stage.promote(digest, "1.1.0", "--commit", report=tmp_path / "r.json")
    assert code == 0, report.get("error")
    assert git_repo.git("log", "-1", "--format=%s") == "release 1.1.0"
    assert git_repo.git("rev-parse", "v1.1.0") == git_repo.git("rev-parse", "HEAD") != head
    assert (git_repo.models / "a" / "2" / "model.py").read_text() == changed
    assert "x + 1" in (git_repo.models / "a" / "1" / "model.py").read_text()
    assert git_repo.git("status", "--porcelain") == ""


def test_promote_commit_of_a_first_release_says_what_it_commits(stage, git_repo, tmp_path, monkeypatch, capsys):
    """Not "no model changed" and "release: none ()" while it releases 1.0.0 of its models."""
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    head = git_repo.commit("first")
    digest, _ = stage.candidate("1.0.0", revision=head)
    for shard in ("shard-1", "shard-2"):
        stage.record(digest, shard)
    monkeypatch.chdir(git_repo.root)
    code, report = stage.promote(digest, "1.0.0", "--commit", report=tmp_path / "r.json")
    printed = capsys.readouterr()
    printed = printed.out + printed.err
    assert code == 0, report.get("error")
    assert "no model changed" not in printed and "release: none" not in printed, printed
    assert "the release commit adds no version folder" in printed and ":1.0.0" in printed, printed
    assert git_repo.git("rev-parse", "v1.0.0") == head


def test_promote_deletes_older_candidates_and_their_records_but_never_a_release(stage, tmp_path):
    released, released_revision = stage.candidate("1.0.0", created="2026-01-01T00:00:00Z")
    for shard in ("shard-1", "shard-2"):
        stage.record(released, shard)
    assert stage.promote(released, "1.0.0", report=tmp_path / "r.json")[0] == 0
    oldest, oldest_revision = stage.candidate("1.1.0", created="2026-02-01T00:00:00Z")
    old, old_revision = stage.candidate("1.1.0", created="2026-03-01T00:00:00Z")
    stage.record(oldest, "shard-1")
    stage.record(old, "shard-1", passed=False, failed=("a/basic",))
    newer, newer_revision = stage.candidate("1.2.0", created="2026-09-01T00:00:00Z")
    digest, revision = stage.candidate("1.1.0", created="2026-04-01T00:00:00Z")
    for shard in ("shard-1", "shard-2"):
        stage.record(digest, shard)

    code, report = stage.promote(digest, "1.1.0", "--keep-candidates", "1", report=tmp_path / "r.json")
    assert code == 0, report.get("error")
    retained = report["steps"]["retain-candidates"]
    assert retained["deleted"] == [candidate_tag(oldest_revision)]
    assert retained["records_deleted"] == [shard_result_tag(oldest, "shard-1")]
    tags = stage.registry.tags()
    assert candidate_tag(oldest_revision) not in tags and shard_result_tag(oldest, "shard-1") not in tags
    assert stage.registry.manifest(oldest) is None
    for kept in (old_revision, newer_revision, revision):  # --keep-candidates 1, newer, and the release
        assert candidate_tag(kept) in tags
    assert shard_result_tag(old, "shard-1") in tags and shard_result_tag(digest, "shard-2") in tags
    assert stage.registry.digest("1.0.0") == released and stage.registry.digest("1.1.0") == digest

    code, report = stage.promote(digest, "1.1.0", report=tmp_path / "r.json")  # a rerun, keeping none
    assert code == 0, report.get("error")
    assert report["steps"]["retain-candidates"]["deleted"] == [candidate_tag(old_revision)]
    assert report["steps"]["retain-candidates"]["kept_as_released"] == [candidate_tag(released_revision)]
    assert stage.registry.digest("1.0.0") == released and stage.registry.digest(candidate_tag(newer_revision)) == newer


def test_a_raw_manifest_goes_up_with_its_media_type(stage):
    config = b'{"hello":"registry"}'
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": "application/x.test",
            "config": {
                "mediaType": "application/x.test",
                "digest": stage.registry.put_blob(config),
                "size": len(config),
            },
            "layers": [],
        }
    ).encode()
    written = stage.registry.put_manifest("raw", Manifest.of(OCI_MANIFEST, body))
    found = stage.registry.manifest("raw")
    assert (found.media_type, found.body, found.digest) == (OCI_MANIFEST, body, written)
