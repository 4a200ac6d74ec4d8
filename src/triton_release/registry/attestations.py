"""Release evidence in the registry, as cosign stores attestations: the tag `sha256-<hex>.att` of
the release's manifest digest holds an OCI image manifest whose layers are DSSE envelopes (media
type application/vnd.dsse.envelope.v1+json), each annotated with its Statement's `predicateType`
and cosign's (empty) `dev.cosignproject.cosign/signature`, with the config blob cosign writes (an
empty image's config listing the layers as diff ids). `cosign verify-attestation` reads exactly this.

Where the registry offers the OCI 1.1 referrers API (GET /v2/<name>/referrers/<digest>), the same
manifest also names the release as its `subject`, so that `oras discover` and referrer-aware
admission controllers find it; docker-registry 2.8 has no such API, and then the tag is all.

The tag is written once a digest by a release (right after its push, whose digest is new) or by the
rerun that finishes one (only where there is none); only promote rewrites it whole, adding the golden
results to what its stage attached to the candidate (a write-once repository refuses that by name:
registry/write_once.py). Retention deletes it with its release (publish.retain).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from triton_release import contract
from triton_release.errors import Refused
from triton_release.registry.client import Manifest, RegistryRepository, content_digest

DSSE_TYPE = "application/vnd.dsse.envelope.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
PREDICATE_TYPE = "predicateType"  # cosign's annotation of a layer
SIGNATURE = "dev.cosignproject.cosign/signature"  # empty for attestations: the signature is in the envelope
SIGNING = "dev.triton-release.signing"  # key | keyless | none (unsigned)
ZERO_TIME = "0001-01-01T00:00:00Z"


@dataclass(frozen=True)
class Layer:
    predicate_type: str
    digest: str
    size: int
    signing: str

    def to_json(self) -> dict:
        return {
            "predicate_type": self.predicate_type,
            "digest": self.digest,
            "size": self.size,
            "signing": self.signing,
        }


@dataclass(frozen=True)
class Envelope:
    """A layer read back: its descriptor and the envelope's bytes."""

    descriptor: Mapping
    body: bytes = field(repr=False)

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.descriptor.get("annotations") or {}


def cosign_config(layer_digests: list[str]) -> bytes:
    """The config blob of cosign's signature and attestation images: an empty image's, its root file
    system the layers (uncompressed: each layer's diff id is its digest), one history entry each."""
    return json.dumps(
        {
            "architecture": "",
            "created": ZERO_TIME,
            "history": [{"created": ZERO_TIME} for _ in layer_digests],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": list(layer_digests)},
            "config": {},
        },
        separators=(",", ":"),
    ).encode()


def write(
    registry: RegistryRepository, subject: str, layers: list[tuple[bytes, Mapping[str, str]]]
) -> tuple[str, str, int, bool]:
    """Put `layers` (envelope bytes, annotations) under the evidence tag of `subject`; returns the
    tag, the manifest's digest, the bytes uploaded at most (blobs and manifest) and whether the
    manifest was also made a referrer of `subject`."""
    descriptors: list[dict] = []
    sent = 0
    for body, notes in layers:
        descriptors.append(
            {"mediaType": DSSE_TYPE, "size": len(body), "digest": registry.put_blob(body), "annotations": dict(notes)}
        )
        sent += len(body)
    config = cosign_config([d["digest"] for d in descriptors])
    manifest: dict = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": registry.put_blob(config)},
        "layers": descriptors,
    }
    referred = registry.referrers(subject) is not None
    if referred:
        target = registry.manifest(subject)
        if target is not None:
            manifest["artifactType"] = DSSE_TYPE
            manifest["subject"] = {"mediaType": target.media_type, "digest": subject, "size": len(target.body)}
    body = json.dumps(manifest, separators=(",", ":")).encode()
    tag = contract.evidence_tag(subject)
    digest = registry.put_manifest(tag, Manifest.of(OCI_MANIFEST, body))
    return tag, digest, sent + len(config) + len(body), referred


def read(registry: RegistryRepository, subject: str) -> tuple[str, list[Envelope]] | None:
    """The evidence of `subject`: its manifest's digest and each layer; None when there is none.
    Something under the tag that is not an image manifest is refused, naming the tag."""
    tag = contract.evidence_tag(subject)
    manifest = registry.manifest(tag)
    if manifest is None:
        return None
    try:
        layers = json.loads(manifest.body).get("layers")
    except (ValueError, AttributeError):
        layers = None
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise Refused(
            f"{registry}:{tag} is not an attestation manifest (it lists no layers). Release again, or "
            f"delete that tag and rerun the release: the rerun attaches the evidence anew."
        )
    found = []
    for layer in layers:
        digest = str(layer.get("digest", ""))
        body = registry.blob(digest)
        if content_digest(body) != digest:
            raise Refused(f"{registry}:{tag}: its layer {digest} does not match its digest in the registry.")
        found.append(Envelope(layer, body))
    return manifest.digest, found


def delete(registry: RegistryRepository, subject: str) -> str | None:
    """Delete the evidence of `subject`; the tag deleted, None when there was none."""
    tag = contract.evidence_tag(subject)
    digest = registry.digest(tag)
    if digest is None:
        return None
    registry.delete(digest)
    return tag
