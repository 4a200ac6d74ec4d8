"""Write-once (immutable) repositories: a refused tag overwrite is a named refusal with the fix,
and `tags: version` writes nothing that would need one (registry/write_once.py, publish.py)."""

from __future__ import annotations

import json

import pytest
import semver

from support.registries import FakeRegistry, MemoryRegistry, ecr_refusal
from triton_release import contract
from triton_release.errors import Refused, UsageError
from triton_release.registry import ledger
from triton_release.registry.client import Manifest, RegistryRepository
from triton_release.registry.publish import finish_interrupted, tag_release
from triton_release.registry.write_once import TagNotOverwritable, refused_overwrite
from triton_release.settings import resolve

COMMIT = "0123456789ab" + "c" * 28


@pytest.mark.parametrize(
    ("status", "body", "refusal"),
    [
        (400, ecr_refusal("x", "latest"), True),  # ECR, IMMUTABLE
        (409, b'{"errors":[{"code":"DENIED","message":"tag latest is immutable"}]}', True),  # Harbor's rules
        (403, b'{"errors":[{"code":"DENIED","message":"cannot overwrite an existing tag"}]}', True),
        (412, b"The tag already exists", True),  # a plain-text answer
        (403, b'{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}', False),
        (400, b'{"errors":[{"code":"MANIFEST_INVALID","message":"manifest invalid"}]}', False),
        (400, b'{"errors":[{"code":"TAG_INVALID","message":"manifest tag did not match URI"}]}', False),
        (404, b'{"errors":[{"message":"already exists"}]}', False),
    ],
)
def test_only_an_answer_refusing_an_overwrite_is_taken_for_one(status, body, refusal):
    assert (refused_overwrite(status, body) is not None) is refusal


def test_ecr_s_refusal_through_the_client_names_the_tag_the_cause_and_both_fixes():
    def immutable(handler):
        if handler.command == "PUT" and "/manifests/" in handler.path:
            handler._send(400, json.loads(ecr_refusal("team/models", "latest")))
            return True
        return False

    with FakeRegistry(auth=False, hook=immutable) as fake:
        repo = RegistryRepository.parse(f"{fake.address}/team/models")
        with pytest.raises(TagNotOverwritable) as refused:
            repo.put_manifest("latest", Manifest.of("application/vnd.oci.image.manifest.v1+json", b"{}"))
    message = str(refused.value)
    assert refused.value.exit_code == 1 and isinstance(refused.value, Refused)
    assert "refused to overwrite the tag latest (HTTP 400: The image tag 'latest' already exists" in message
    assert "forbids overwriting tags" in message
    assert "IMMUTABLE_WITH_EXCLUSION" in message and "`tags: version`" in message


def test_a_plain_403_on_a_put_is_still_a_credentials_refusal():
    with FakeRegistry(status=403) as fake:
        repo = RegistryRepository.parse(f"{fake.address}/team/models")
        with pytest.raises(Refused, match="Give credentials") as refused:
            repo.put_manifest("latest", Manifest.of("application/vnd.oci.image.manifest.v1+json", b"{}"))
    assert not isinstance(refused.value, TagNotOverwritable)


def _released(registry: MemoryRegistry, version: str, commit: str = COMMIT) -> Manifest:
    """X.Y.Z pushed as `push` does it: entered in the ledger, put, confirmed."""
    image = registry.image({contract.REVISION_LABEL: commit}, layer=version)
    ledger.intend(registry, version, commit, image.config_digest, image.digest)
    registry.put_manifest(version, image)
    ledger.enter(registry, version, {contract.REVISION_LABEL: commit}, image.config_digest, image.digest)
    return image


def test_tags_version_writes_only_the_provenance_tag_and_moves_none():
    registry = MemoryRegistry(write_once=True)
    first = _released(registry, "1.0.0")
    tagged = tag_release(registry, "1.0.0", COMMIT, "latest", first.digest, tags="version")
    assert tagged.tags == (f"sha-{COMMIT[:12]}",)
    assert [t for t in registry.tags() if not contract.is_ledger_tag(t)] == ["1.0.0", f"sha-{COMMIT[:12]}"]
    written = list(registry.puts)
    again = tag_release(registry, "1.0.0", COMMIT, "latest", first.digest, tags="version")  # a rerun: nothing written
    assert again.tags == tagged.tags and registry.puts == written


def test_a_moving_tag_refused_by_a_write_once_repository_says_what_was_done_and_the_fix():
    registry = MemoryRegistry(write_once=True)
    tag_release(registry, "1.0.0", COMMIT, "latest", _released(registry, "1.0.0").digest)  # the first: all new
    second = _released(registry, "1.0.1")
    with pytest.raises(TagNotOverwritable) as refused:
        tag_release(registry, "1.0.1", "f" * 40, "latest", second.digest)
    message = " ".join(str(refused.value).split())
    assert refused.value.tag == "1.0" and refused.value.exit_code == 1
    assert f"1.0.1 is released as {second.digest}" in message
    assert "1.0 and those after it (1.0, 1, sha-ffffffffffff, latest) were left where they were" in message
    assert "forbids overwriting tags" in message and "`tags: version`" in message


def test_finishing_an_interrupted_release_with_tags_version_moves_nothing():
    registry = MemoryRegistry(write_once=True)
    tag_release(registry, "1.0.0", COMMIT, "latest", _released(registry, "1.0.0").digest)
    _released(registry, "1.1.0", "e" * 40)  # its run stopped before its tags: X.Y, X and latest are behind
    finished = finish_interrupted(registry, "latest", tags="version")
    assert finished.tags == ("sha-eeeeeeeeeeee",) and registry.digest("latest") == registry.digest("1.0.0")


def test_the_tags_setting_is_all_or_version(tmp_path):
    assert resolve({}, cwd=tmp_path).publish.tags == "all"
    assert resolve({"tags": "version"}, cwd=tmp_path).publish.tags == "version"
    with pytest.raises(UsageError):
        resolve({"tags": "none"}, cwd=tmp_path)
    assert contract.moving_tags(semver.Version(1, 2, 3), COMMIT, "stable", "version") == [f"sha-{COMMIT[:12]}"]
    assert contract.moving_tags(semver.Version(1, 2, 3), COMMIT, "stable") == [
        "1.2",
        "1",
        f"sha-{COMMIT[:12]}",
        "stable",
    ]
