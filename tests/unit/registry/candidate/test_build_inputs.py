"""A staged candidate is reused only when it was built from every input a stage builds from: the
base image's id, the stub, the Python, the settings that shape the image, as its label says.
Against a loopback registry that answers the candidate's manifest and configuration only."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields, replace

import pytest

from support.registries import FakeRegistry
from triton_release.contract import BUILD_INPUTS_LABEL, CHANGED_LABEL, SHARDS_LABEL, candidate_tag
from triton_release.models.shards import (
    Shard,
    build_inputs_label,
    shards_label,
)
from triton_release.registry.candidate.stage import build_inputs, differences, find_reusable
from triton_release.registry.client import RegistryRepository
from triton_release.settings import ImageOptions, PublishOptions

COMMIT = "0123456789abcdef" * 2 + "01234567"
BASE = "sha256:" + "4a" * 32
STUB38_BASE = "sha256:" + "fd" * 32
IMAGE = {f.name for f in fields(ImageOptions)}
PUBLISH = {f.name for f in fields(PublishOptions)}


def inputs(**changed) -> dict:
    """The build inputs of a stage with the default settings but `changed` (a setting's key, or
    base_image_id or source)."""
    image = replace(ImageOptions("local/tritonserver:24.10-py3"), **{k: v for k, v in changed.items() if k in IMAGE})
    publish = replace(PublishOptions(), **{k: v for k, v in changed.items() if k in PUBLISH})
    return build_inputs(
        image, publish, base_image_id=changed.get("base_image_id", BASE), source=changed.get("source", "")
    )


def staged_with(labels: dict) -> FakeRegistry:
    """A registry holding candidate-<sha12> of COMMIT: an image manifest whose configuration has `labels`."""
    config = json.dumps({"config": {"Labels": labels}}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [],
        }
    ).encode()

    def blobs(handler) -> bool:
        if handler.command == "GET" and handler.path.endswith(f"/blobs/{config_digest}"):
            handler._send(200, config)
            return True
        return False

    fake = FakeRegistry(auth=False, hook=blobs)
    held = ("application/vnd.oci.image.manifest.v1+json", manifest)
    fake.manifests[candidate_tag(COMMIT)] = fake.manifests["sha256:" + hashlib.sha256(manifest).hexdigest()] = held
    return fake


def candidate_labels(built_from: dict | None) -> dict:
    labels = {
        SHARDS_LABEL: shards_label([Shard("shard-1", ("a",), ("a",), 1, False, (1,))]),
        CHANGED_LABEL: '["a"]',
        "org.opencontainers.image.version": "1.0.0",
        "org.opencontainers.image.revision": COMMIT,
    }
    if built_from is not None:
        labels[BUILD_INPUTS_LABEL] = build_inputs_label(built_from)
    return labels


def test_the_same_inputs_reuse_the_candidate():
    with staged_with(candidate_labels(inputs())) as fake:
        found = find_reusable(RegistryRepository.parse(f"{fake.address}/team/models"), COMMIT, None, inputs())
    assert found is not None and found.reused and found.candidate.changed == ("a",)


@pytest.mark.parametrize(
    "changed",
    [
        {"base_image_id": STUB38_BASE},
        {"stub": "source"},
        {"python": "3.10"},
        {"max_layers": 60},
        {"requirements_options": "allow"},
        {"channel": "beta"},
        {"warmup": "golden"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_candidate_built_from_other_inputs_is_built_again_saying_which(changed, caplog):
    with staged_with(candidate_labels(inputs(**changed))) as fake:
        registry = RegistryRepository.parse(f"{fake.address}/team/models")
        assert find_reusable(registry, COMMIT, None, inputs()) is None
    [key] = changed
    [message] = [r.getMessage() for r in caplog.records]
    assert f"was staged from this commit with other build inputs ({key} " in message
    assert "built again" in message


def test_a_candidate_that_does_not_say_what_it_was_built_from_is_built_again(caplog):
    with staged_with(candidate_labels(None)) as fake:
        assert find_reusable(RegistryRepository.parse(f"{fake.address}/team/models"), COMMIT, None, inputs()) is None
    assert BUILD_INPUTS_LABEL in caplog.records[0].getMessage()


def test_a_stub_file_counts_by_its_content(tmp_path):
    stub = tmp_path / "triton_python_backend_stub"
    stub.write_bytes(b"one")
    first = inputs(stub=f"path:{stub}")
    stub.write_bytes(b"two")
    second = inputs(stub=f"path:{stub}")
    assert differences(first, second) == [
        f"stub_sha256 {hashlib.sha256(b'one').hexdigest()} -> {hashlib.sha256(b'two').hexdigest()}"
    ]
    assert differences(inputs(), inputs()) == []
