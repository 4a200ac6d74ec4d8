"""Release evidence on the real registry, daemon and tritonserver: a signed release carries four
DSSE envelopes about its digest (in-toto's Test Results among them) that `cryptography` alone
verifies over the pre-authentication encoding; `verify` and `rollback --key` refuse evidence that is another key's, another image's or
unsigned; retention deletes a deleted release's evidence and keeps a kept one's; nothing secret is
in it; and a rerun attaches evidence a release lacks."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from support.models import python_model_files
from support.reports import read_report
from support.wheels import make_wheel, offline_index
from triton_release import contract
from triton_release.cli.main import main
from triton_release.evidence.sbom import listed_packages
from triton_release.registry.client import Manifest

pytestmark = pytest.mark.integration

SECRET = "tr-secret-" + "5e" * 12  # an environment variable's value that must never reach the evidence


def pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


@pytest.fixture
def keys(tmp_path):
    """A signing key, its public key, and another public key: (key.pem, cosign.pub, other.pub, the key)."""
    found = []
    for name in ("key", "other"):
        key = ec.generate_private_key(ec.SECP256R1())
        (tmp_path / f"{name}.pem").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        (tmp_path / f"{name}.pub").write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        found.append(key)
    return tmp_path / "key.pem", tmp_path / "key.pub", tmp_path / "other.pub", found[0]


@pytest.fixture
def models(git_repo, tmp_path, monkeypatch):
    """Model a with its own environment (shared 1.0, from a wheel made here), model b without."""
    monkeypatch.setenv("TRITON_RELEASE_CACHE", str(tmp_path / "cache"))
    wheel = make_wheel(tmp_path / "index", "shared", "1.0")
    offline_index(monkeypatch, tmp_path / "index")
    files = {**python_model_files("a"), **python_model_files("b"), "a/requirements.txt": "shared==1.0\n"}
    git_repo.write(files)
    git_repo.commit("two models")
    return git_repo, hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.fixture
def cleaned(releaser, docker_client):
    """The releaser, and every tag of its registry repository (and local image of it) removed after."""
    yield releaser
    registry = releaser.registry
    for digest in {registry.digest(tag) for tag in registry.tags()} - {None}:
        registry.delete(digest)
    for image in docker_client.images.list(name=releaser.target):
        for tag in image.tags:
            if not tag.endswith(":candidate"):  # the releaser's own, removed by it
                docker_client.images.remove(tag)


def command(tmp_path, *args: str) -> tuple[int, dict]:
    report = tmp_path / "command.json"
    report.unlink(missing_ok=True)
    code = main([*args, "--report", str(report)])
    return code, read_report(report)


def envelopes(registry, digest: str) -> list[tuple[dict, dict, bytes]]:
    """(layer descriptor, envelope, manifest bytes) of each layer under the digest's .att tag."""
    manifest = registry.manifest(contract.evidence_tag(digest))
    assert manifest is not None, f"no {contract.evidence_tag(digest)}"
    return [(layer, json.loads(registry.blob(layer["digest"])), manifest.body) for layer in manifest.layers]


def test_signed_evidence_verifies_alone_and_refuses_keys_subjects_and_rollbacks_it_should(
    models, cleaned, keys, tmp_path, monkeypatch, docker_client
):
    git_repo, wheel_sha = models
    private, public, other, key = keys
    monkeypatch.setenv("TRITON_RELEASE_TEST_TOKEN", SECRET)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)  # outside Actions: the Test Results name no run
    registry = cleaned.registry
    first = cleaned("--signing-key", str(private))
    digest = first["digest"]
    assert first["steps"]["evidence"]["signing"] == "key" and first["steps"]["evidence"]["golden_passed"] is True
    assert list(first["steps"])[-4:] == ["push", "evidence", "tags", "tidy"]  # before any moving tag

    layers = envelopes(registry, digest)
    kinds = {}
    for descriptor, envelope, _ in layers:
        assert descriptor["mediaType"] == "application/vnd.dsse.envelope.v1+json"
        payload = base64.b64decode(envelope["payload"])
        [signature] = envelope["signatures"]
        key.public_key().verify(
            base64.b64decode(signature["sig"]), pae(envelope["payloadType"], payload), ec.ECDSA(hashes.SHA256())
        )  # raises unless the signature holds
        statement = json.loads(payload)
        assert statement["subject"][0]["digest"] == {"sha256": digest.split(":")[1]}
        assert descriptor["annotations"]["predicateType"] == statement["predicateType"]
        kinds[statement["predicateType"]] = statement["predicate"]
    assert set(kinds) == {
        "https://triton-release.dev/golden/v1",
        "https://in-toto.io/attestation/test-result/v0.1",
        "https://slsa.dev/provenance/v1",
        "https://cyclonedx.org/bom",
    }
    tests = kinds["https://in-toto.io/attestation/test-result/v0.1"]
    assert tests["result"] == "pass" and "url" not in tests
    assert tests["passedTests"] == ["a/basic", "b/basic"]
    assert tests["warnedTests"] == [] and tests["failedTests"] == []
    assert [d["name"] for d in tests["configuration"]] == [
        "model_repository/a/golden/basic.json",
        "model_repository/b/golden/basic.json",
    ]
    for descriptor in tests["configuration"]:  # each case file's blob at the released commit
        assert descriptor["digest"] == {"gitBlob": git_repo.git("rev-parse", f"HEAD:{descriptor['name']}")}
    golden = kinds["https://triton-release.dev/golden/v1"]
    assert golden["passed"] and sorted(m["model"] for m in golden["models"]) == ["a", "b"]
    bom = kinds["https://cyclonedx.org/bom"]
    assert ("shared", "1.0") in listed_packages(bom)
    [shared] = [c for c in bom["components"] if c["name"] == "shared"]
    assert shared["hashes"] == [{"alg": "SHA-256", "content": wheel_sha}]
    provenance = kinds["https://slsa.dev/provenance/v1"]
    assert provenance["buildDefinition"]["externalParameters"]["source"]["revision"] == git_repo.git(
        "rev-parse", "HEAD"
    )

    # nothing secret: not the key, not a credential, not the environment
    everything = b"".join(json.dumps(e).encode() + base64.b64decode(e["payload"]) + m for _, e, m in layers)
    for line in private.read_text().splitlines()[1:-1]:
        assert line.encode() not in everything
    assert SECRET.encode() not in everything and b"TRITON_RELEASE_TEST_TOKEN" not in everything

    code, report = command(tmp_path, "verify", f"{cleaned.target}:1.0.0", "--key", str(public))
    assert code == 0 and len(report["steps"]["check-evidence"]["statements"]) == 4
    assert {s["kind"]: s["verified"] for s in report["steps"]["check-evidence"]["statements"]} == {
        "golden results": True,
        "in-toto test results": True,
        "SLSA provenance": True,
        "CycloneDX SBOM": True,
    }
    assert report["steps"]["check-evidence"]["test_results"]["result"] == "pass"
    code, report = command(tmp_path, "verify", f"{cleaned.target}@{digest}", "--key", str(other))
    assert code == 1 and "does not verify with the key" in report["error"]["message"]

    # another image's evidence under 1.0.0's tag: the subject does not match; rollback refuses it
    model_py = git_repo.models / "b" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\n# b, again\n")
    git_repo.commit("b: a change")
    second = cleaned("--signing-key", str(private))
    assert second["version"] == "1.1.0"
    tag = contract.evidence_tag(digest)
    own = registry.manifest(tag)
    theirs = registry.manifest(contract.evidence_tag(second["digest"]))
    registry.put_manifest(tag, theirs)
    code, report = command(tmp_path, "verify", f"{cleaned.target}:1.0.0", "--key", str(public))
    assert code == 1 and "the subject does not match" in report["error"]["message"]
    code, report = command(
        tmp_path, "rollback", "--repo", cleaned.target, "--to-version", "1.0.0", "--key", str(public)
    )
    assert code == 1 and "the subject does not match" in report["error"]["message"]
    assert "rollback" not in report["steps"] and registry.digest("latest") == second["digest"]

    # retention: the deleted release's evidence goes with it, the kept one's stays
    registry.put_manifest(tag, Manifest.of(own.media_type, own.body))
    kept = cleaned("--keep", "1")
    assert kept["steps"]["retain"]["deleted"] == ["1.0.0"]
    assert kept["steps"]["retain"]["evidence_deleted"] == [tag]
    assert registry.digest(tag) is None
    assert registry.digest(contract.evidence_tag(second["digest"])) is not None
    assert command(tmp_path, "verify", f"{cleaned.target}:latest", "--key", str(public))[0] == 0


def test_unsigned_evidence_is_attached_and_said_so_and_a_rerun_attaches_what_is_missing(
    models, cleaned, keys, tmp_path, monkeypatch
):
    _, public, _, _ = keys
    registry = cleaned.registry
    first = cleaned()
    digest = first["digest"]
    assert first["steps"]["evidence"]["signing"] == "none" and first["evidence_signed"] is False
    for descriptor, envelope, _ in envelopes(registry, digest):
        assert envelope["signatures"] == [] and descriptor["annotations"]["dev.triton-release.signing"] == "none"
    code, report = command(tmp_path, "verify", f"{cleaned.target}:1.0.0", "--key", str(public))
    assert code == 1 and "unsigned" in report["error"]["message"]

    registry.delete(registry.digest(contract.evidence_tag(digest)))  # as a run stopped right after its push
    for name, value in {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "org/models",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_RUN_ATTEMPT": "2",
    }.items():  # the rerun inside a GitHub run: the Test Results name it
        monkeypatch.setenv(name, value)
    rerun = cleaned()
    assert rerun["released"] is False
    assert rerun["steps"]["evidence"]["how"] == "rerun" and rerun["steps"]["evidence"]["golden_passed"] is True
    statements = {
        layer["annotations"]["predicateType"]: json.loads(base64.b64decode(envelope["payload"]))
        for layer, envelope, _ in envelopes(registry, digest)
    }
    assert len(statements) == 4
    tests = statements[contract.TEST_RESULT_TYPE]
    assert tests["subject"][0]["digest"] == {"sha256": digest.split(":")[1]}
    assert tests["predicate"]["result"] == "pass"
    assert tests["predicate"]["passedTests"] == ["a/basic", "b/basic"]
    assert tests["predicate"]["url"] == "https://github.com/org/models/actions/runs/4242/attempts/2"
