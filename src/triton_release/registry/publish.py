"""Push under the immutable X.Y.Z, move the other tags, keep or prune releases, roll back.

Layers go up through the Docker daemon (it uploads only the blobs the registry lacks, and
writes the manifest last, so a tag never points at a partial image). Every other tag is a
registry-side retag: a manifest PUT, no layer moves. The channel tag moves last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import docker
import requests

from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history.releases import (REVISION_LABEL, is_provenance_tag, is_release_tag, moving_tags, parse_version,
                                             versions_in)
from triton_release.registry.client import Manifest, RegistryRepository

class AlreadyReleased(Refused):
    """X.Y.Z exists with other contents: nothing of this release was published."""

    already_released = True


@dataclass(frozen=True)
class PushResult:
    """The immutable X.Y.Z in the registry: from here on the release is published."""
    repository: str
    version: str
    digest: str
    layers_uploaded: int      # sent to the registry
    layers_mounted: int       # already in the registry under another repository: linked, not sent
    layers_present: int       # already in this repository

    def to_json(self) -> dict:
        return {"repository": self.repository, "version": self.version, "digest": self.digest,
                "image": f"{self.repository}:{self.version}", "layers_uploaded": self.layers_uploaded,
                "layers_mounted": self.layers_mounted, "layers_already_present": self.layers_present}

    def facts(self) -> dict:
        return {"version": self.version, "image": f"{self.repository}:{self.version}", "digest": self.digest,
                "released": True}


@dataclass(frozen=True)
class Tagged:
    """The moving tags pointed at a release: X.Y, X, sha-<12 hex>, the channel last."""
    repository: str
    version: str
    tags: tuple[str, ...]
    channel_before: str | None  # the digest the channel pointed at before: roll forward with it

    def to_json(self) -> dict:
        return {"repository": self.repository, "version": self.version, "tags": list(self.tags),
                "channel_digest_before": self.channel_before}


def push(client: docker.DockerClient, image: str, registry: RegistryRepository, version: str) -> PushResult:
    """Push the local `image` as X.Y.Z; an X.Y.Z of other contents is refused before any upload,
    the same image pushed before (an interrupted run) is resumed."""
    parse_version(version)
    try:
        local = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(f"{image}: no such image on this Docker host; build it with `triton-release build`.") from None
    existing = registry.digest(version)
    ours = {d.split("@", 1)[1] for d in local.attrs.get("RepoDigests") or [] if d.startswith(f"{registry}@")}
    if existing is not None and existing not in ours:
        raise AlreadyReleased(f"""
            {registry}:{version} already exists, and released versions are immutable: nothing was pushed.
            Release the next version (the previous release is read from the registry's tags).""")
    if existing is None:
        local.tag(str(registry), version)
        uploaded, mounted, present = _daemon_push(client, registry, version)
    else:  # this very image went up before and the run stopped: resume
        uploaded, mounted, present = 0, 0, len(registry.manifest(version).layers)
    digest = registry.digest(version) or ""
    return PushResult(str(registry), version, digest, uploaded, mounted, present)


def published(registry: RegistryRepository, version: str) -> bool | None:
    """Whether X.Y.Z is in the registry; None when the registry cannot say."""
    try:
        return registry.digest(version) is not None
    except (InfrastructureError, Refused):
        return None


def tag_release(registry: RegistryRepository, version: str, revision: str | None, channel: str) -> Tagged:
    """Point X.Y, X, sha-<12> and, last, the channel at release `version`'s manifest."""
    release = parse_version(version)
    manifest = registry.manifest(version)
    channel_before = registry.digest(channel)
    tags = moving_tags(release, revision, channel)
    for tag in tags:
        registry.put_manifest(tag, manifest)
    return Tagged(str(registry), version, tuple(tags), channel_before)


@dataclass(frozen=True)
class Finished:
    """The moving tags of an interrupted release, pointed at it by a later run."""
    repository: str
    version: str | None
    digest: str | None
    tags: tuple[str, ...]

    def to_json(self) -> dict:
        return {"repository": self.repository, "version": self.version, "digest": self.digest,
                "finished_tags": list(self.tags)}

    def facts(self) -> dict:
        if not self.tags:
            return {}
        return {"version": self.version, "image": f"{self.repository}:{self.version}", "digest": self.digest}


def finish_interrupted(registry: RegistryRepository, channel: str) -> Finished:
    """The newest release's moving tags, when a run stopped after pushing X.Y.Z but before moving
    them (its X.Y points elsewhere). A rollback moves only the channel, so it is never undone here."""
    versions = versions_in(registry.tags())
    if not versions:
        return Finished(str(registry), None, None, ())
    newest = versions[-1]
    digest = registry.digest(str(newest))
    if registry.digest(f"{newest.major}.{newest.minor}") == digest:
        return Finished(str(registry), str(newest), digest, ())
    labels = registry.image_config(str(newest)).get("config", {}).get("Labels") or {}
    tagged = tag_release(registry, str(newest), labels.get(REVISION_LABEL) or None, channel)
    return Finished(str(registry), str(newest), digest, tagged.tags)


def _daemon_push(client: docker.DockerClient, registry: RegistryRepository, tag: str) -> tuple[int, int, int]:
    """docker push, streamed; returns the layers uploaded, mounted from another repository, present."""
    uploaded = mounted = present = 0
    try:
        for event in client.api.push(str(registry), tag=tag, auth_config=registry.credentials.docker_auth() if registry.credentials else None, stream=True, decode=True):
            if "error" in event:
                message = event.get("errorDetail", {}).get("message") or event["error"]
                if "denied" in message or "unauthorized" in message or "authentication required" in message:
                    raise Refused(f"""
                        The registry {registry.host} refused the push of {registry}:{tag} ({message}). Give
                        credentials that may push there (username/password inputs, TRITON_RELEASE_USERNAME
                        and TRITON_RELEASE_PASSWORD, or `docker login {registry.host}`).""")
                raise InfrastructureError(f"""
                    The push of {registry}:{tag} failed ({message}); no tag points at a partial image. Run
                    the push again when the registry is back: layers already uploaded are not sent again.""")
            status = event.get("status", "")
            if status == "Pushed":
                uploaded += 1
            elif status.startswith("Mounted from"):
                mounted += 1
            elif status == "Layer already exists":
                present += 1
    except (docker.errors.APIError, requests.RequestException) as exc:
        raise InfrastructureError(f"The Docker daemon failed while pushing {registry}:{tag}: {exc}") from None
    return uploaded, mounted, present


@dataclass(frozen=True)
class Retention:
    repository: str
    keep: int
    deleted: tuple[str, ...]

    def to_json(self) -> dict:
        return {"repository": self.repository, "keep": self.keep, "deleted": list(self.deleted)}


def retain(registry: RegistryRepository, keep: int, channel: str) -> Retention:
    """Delete the oldest releases beyond `keep`, never one a moving tag or the channel points at."""
    if keep < 1:  # the `keep` setting refuses it; a caller of this function may not have used it
        raise UsageError("--keep must be 1 or more (without it every release is kept).")
    tags = registry.tags()
    releases = versions_in(tags)
    if len(releases) <= keep:
        return Retention(str(registry), keep, ())
    protected = {registry.digest(t) for t in tags if not is_release_tag(t) and not is_provenance_tag(t)}
    protected.add(registry.digest(channel))
    deleted = []
    for version in releases[:-keep]:
        digest = registry.digest(str(version))
        if digest and digest not in protected:
            registry.delete(digest)
            deleted.append(str(version))
    return Retention(str(registry), keep, tuple(deleted))


# -- rollback ---------------------------------------------------------------------------------

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
        return {"repository": self.repository, "channel": self.channel, "to_version": self.version,
                "digest": self.digest, "previous_digest": self.previous_digest, "verified": self.verified,
                **({"test": self.golden} if self.golden else {})}

    def facts(self) -> dict:
        return {"version": self.version, "image": f"{self.repository}:{self.version}", "digest": self.digest}


def release_manifest(registry: RegistryRepository, version: str) -> Manifest:
    parse_version(version, "--to-version")
    manifest = registry.manifest(version)
    if manifest is None:
        known = versions_in(registry.tags())
        target = parse_version(version)
        nearest = sorted(known, key=lambda v: (abs(v.major - target.major), abs(v.minor - target.minor),
                                               abs(v.patch - target.patch)))[:3]
        listed = ", ".join(str(v) for v in sorted(nearest)) or "none: the repository has no release"
        raise Refused(f"{registry}:{version} does not exist, so there is nothing to roll back to. "
                      f"Nearest releases: {listed}.")
    return manifest


def rollback(registry: RegistryRepository, version: str, channel: str = "latest",
             verified: dict | None = None) -> Rollback:
    """Point `channel` at release `version` by a manifest PUT. `verified`: the golden run that
    passed against that release first, for the report."""
    manifest = release_manifest(registry, version)
    before = registry.digest(channel)
    registry.put_manifest(channel, manifest)
    return Rollback(str(registry), channel, version, manifest.digest, before, verified is not None, verified or {})


@dataclass(frozen=True)
class ModelRollback:
    server: str
    model: str
    version: int
    version_policy_before: dict | None

    def to_json(self) -> dict:
        return {"server": self.server, "model": self.model, "version": self.version,
                "version_policy_before": self.version_policy_before}


def rollback_model(server: str, model: str, version: int) -> ModelRollback:
    """Ask a running tritonserver (explicit mode) to serve `version` of `model` only."""
    base = server if server.startswith("http") else f"http://{server}"
    try:
        answer = requests.get(f"{base}/v2/models/{model}/config", timeout=10)
        if answer.status_code != 200:
            raise Refused(f"{server} does not serve a model {model!r} (HTTP {answer.status_code}): "
                          f"{answer.text.strip()[:200]}")
        config = answer.json()
        before = config.get("version_policy")
        config["version_policy"] = {"specific": {"versions": [version]}}
        load = requests.post(f"{base}/v2/repository/models/{model}/load",
                             json={"parameters": {"config": json.dumps(config)}}, timeout=600)
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
