"""Rollback: a channel pointed back at an earlier release, by registry-side retag, and recorded;
or a running server asked to serve an earlier version of one model.

The record is a tag `triton-release.rollback.<channel>` on a copy of the release's manifest with
annotations (channel, version, when). A rerun that finishes an interrupted release moves the
channel only when no rollback was recorded after that release was built.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import requests

from triton_release.contract import rollback_tag
from triton_release.errors import InfrastructureError, Refused
from triton_release.history.releases import parse_version, versions_in
from triton_release.registry.client import Manifest, RegistryRepository

ROLLBACK_AT = "org.triton-release.rollback.at"
log = logging.getLogger("triton_release")


def record_rollback(registry: RegistryRepository, channel: str, version: str, manifest: Manifest) -> None:
    body = json.loads(manifest.body)
    body["annotations"] = {
        **(body.get("annotations") or {}),
        "org.triton-release.rollback.channel": channel,
        "org.triton-release.rollback.version": version,
        ROLLBACK_AT: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    raw = json.dumps(body, indent=3).encode()
    record = Manifest(manifest.media_type, raw, "sha256:" + hashlib.sha256(raw).hexdigest())
    try:
        registry.put_manifest(rollback_tag(channel), record)
    except (Refused, InfrastructureError) as exc:
        log.warning(
            f"{channel} was rolled back to {version}, but the record of it could not be written ({exc}); "
            "a rerun of an interrupted release could move the channel forward again"
        )


def rolled_back_since(registry: RegistryRepository, channel: str, created: str) -> bool:
    """Whether a rollback of `channel` was recorded after `created` (an image's creation time)."""
    record = registry.manifest(rollback_tag(channel))
    if record is None:
        return False
    try:
        at = (json.loads(record.body).get("annotations") or {}).get(ROLLBACK_AT, "")
    except ValueError:
        return False
    return bool(at) and (not created or at[:19] > created[:19])  # ISO-8601 UTC times compare as text


@dataclass(frozen=True)
class Rollback:
    repository: str
    channel: str
    version: str
    digest: str
    previous_digest: str | None
    verified: bool = False
    golden: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "channel": self.channel,
            "to_version": self.version,
            "digest": self.digest,
            "previous_digest": self.previous_digest,
            "verified": self.verified,
            **({"test": self.golden} if self.golden else {}),
        }

    def facts(self) -> dict:
        return {"version": self.version, "image": f"{self.repository}:{self.version}", "digest": self.digest}


def release_manifest(registry: RegistryRepository, version: str) -> Manifest:
    parse_version(version, "--to-version")
    manifest = registry.manifest(version)
    if manifest is None:
        known = versions_in(registry.tags())
        target = parse_version(version)
        nearest = sorted(
            known, key=lambda v: (abs(v.major - target.major), abs(v.minor - target.minor), abs(v.patch - target.patch))
        )[:3]
        listed = ", ".join(str(v) for v in sorted(nearest)) or "none: the repository has no release"
        raise Refused(
            f"{registry}:{version} does not exist, so there is nothing to roll back to. Nearest releases: {listed}."
        )
    return manifest


def rollback(
    registry: RegistryRepository, version: str, channel: str = "latest", verified: dict | None = None
) -> Rollback:
    """Point `channel` at release `version` by a manifest PUT. `verified`: the golden run that
    passed against that release first, for the report."""
    manifest = release_manifest(registry, version)
    before = registry.digest(channel)
    registry.put_manifest(channel, manifest)
    record_rollback(registry, channel, version, manifest)
    return Rollback(str(registry), channel, version, manifest.digest, before, verified is not None, verified or {})


@dataclass(frozen=True)
class ModelRollback:
    server: str
    model: str
    version: int
    version_policy_before: dict | None

    def to_json(self) -> dict:
        return {
            "server": self.server,
            "model": self.model,
            "version": self.version,
            "version_policy_before": self.version_policy_before,
        }


def rollback_model(server: str, model: str, version: int) -> ModelRollback:
    """Ask a running tritonserver (explicit mode) to serve `version` of `model` only."""
    base = server if server.startswith("http") else f"http://{server}"
    try:
        answer = requests.get(f"{base}/v2/models/{model}/config", timeout=10)
        if answer.status_code != 200:
            raise Refused(
                f"{server} does not serve a model {model!r} (HTTP {answer.status_code}): {answer.text.strip()[:200]}"
            )
        config = answer.json()
        before = config.get("version_policy")
        config["version_policy"] = {"specific": {"versions": [version]}}
        load = requests.post(
            f"{base}/v2/repository/models/{model}/load",
            json={"parameters": {"config": json.dumps(config)}},
            timeout=600,
        )
        if load.status_code != 200:
            raise Refused(f"""
                {server} could not load version {version} of {model}: {load.text.strip()[:300]}. Is
                {model}/{version} in the image, and does the server run with
                --model-control-mode=explicit?""")
        ready = requests.get(f"{base}/v2/models/{model}/versions/{version}/ready", timeout=10)
    except requests.RequestException as exc:
        raise InfrastructureError(f"The server {server} is unreachable ({exc.__class__.__name__}).") from None
    if ready.status_code != 200:
        raise Refused(f"{server} loaded {model} but version {version} is not ready.")
    return ModelRollback(server, model, version, before)
