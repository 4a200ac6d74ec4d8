"""Push under the immutable X.Y.Z, move the other tags, keep or prune releases, roll back.

Layers go up through the Docker daemon (it uploads only the blobs the registry lacks, and
writes the manifest last, so a tag never points at a partial image). Every other tag is a
registry-side retag: a manifest PUT, no layer moves. The channel tag moves last.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import docker
import requests
import semver

from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.registry.client import Credentials, Manifest, RegistryRepository

RELEASE_TAG = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def release_versions(tags: list[str]) -> list[semver.Version]:
    return sorted(semver.Version(*map(int, m.groups())) for t in tags if (m := RELEASE_TAG.match(t)))


def parse_version(text: str, flag: str = "--version") -> semver.Version:
    match = RELEASE_TAG.match(text or "")
    if not match:
        raise UsageError(f"{flag} {text!r}: give a release version X.Y.Z, such as 1.4.0.")
    return semver.Version(*map(int, match.groups()))


def moving_tags(version: semver.Version, commit: str | None, channel: str) -> list[str]:
    """In the order they are written: X.Y, X, sha-<12 hex>, then the channel."""
    tags = [f"{version.major}.{version.minor}", f"{version.major}"]
    if commit:
        tags.append(f"sha-{commit[:12]}")
    return tags + [channel]


@dataclass(frozen=True)
class PushResult:
    repository: str
    version: str
    digest: str
    tags: tuple[str, ...]
    layers_uploaded: int      # sent to the registry
    layers_mounted: int       # already in the registry under another repository: linked, not sent
    layers_present: int       # already in this repository
    channel_before: str | None
    deleted: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"repository": self.repository, "version": self.version, "digest": self.digest,
                "image": f"{self.repository}:{self.version}", "tags": list(self.tags),
                "layers_uploaded": self.layers_uploaded, "layers_mounted": self.layers_mounted,
                "layers_already_present": self.layers_present,
                "channel_digest_before": self.channel_before, "deleted": list(self.deleted)}


def _auth(credentials: Credentials | None) -> dict | None:
    return {"username": credentials.username, "password": credentials.password} if credentials else None


def push(client: docker.DockerClient, image: str, repo: RegistryRepository, version: str,
         commit: str | None = None, channel: str = "latest", keep: int | None = None) -> PushResult:
    release = parse_version(version)
    try:
        local = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(f"{image}: no such image on this Docker host; build it with `triton-release build`.") from None
    existing = repo.digest(version)
    ours = {d.split("@", 1)[1] for d in local.attrs.get("RepoDigests") or [] if d.startswith(f"{repo}@")}
    if existing is not None and existing not in ours:
        raise Refused(f"""
            {repo}:{version} already exists, and released versions are immutable: nothing was pushed.
            Release the next version (the previous release is read from the registry's tags).""")
    if existing is None:
        local.tag(str(repo), version)
        uploaded, mounted, present = _daemon_push(client, repo, version)
    else:  # this very image went up before and the run stopped: finish its tags
        uploaded, mounted, present = 0, 0, len(repo.manifest(version).layers)
    digest = repo.digest(version) or ""
    channel_before = repo.digest(channel)
    tags = [version, *move_tags(repo, release, commit, channel)]
    deleted = retain(repo, keep, channel) if keep is not None else []
    return PushResult(str(repo), version, digest, tuple(tags), uploaded, mounted, present, channel_before,
                      tuple(deleted))


def move_tags(repo: RegistryRepository, version: semver.Version, commit: str | None, channel: str) -> list[str]:
    """Point X.Y, X, sha-<12> and, last, the channel at release `version`'s manifest."""
    manifest = repo.manifest(str(version))
    tags = moving_tags(version, commit, channel)
    for tag in tags:
        repo.put_manifest(tag, manifest)
    return tags


def finish_interrupted(repo: RegistryRepository, channel: str) -> list[str]:
    """The newest release's moving tags, when a run stopped after pushing X.Y.Z but before moving
    them (its X.Y points elsewhere). A rollback moves only the channel, so it is never undone here."""
    versions = release_versions(repo.tags())
    if not versions:
        return []
    newest = versions[-1]
    digest = repo.digest(str(newest))
    if repo.digest(f"{newest.major}.{newest.minor}") == digest:
        return []
    labels = repo.image_config(str(newest)).get("config", {}).get("Labels") or {}
    return move_tags(repo, newest, labels.get("org.opencontainers.image.revision") or None, channel)


def _daemon_push(client: docker.DockerClient, repo: RegistryRepository, tag: str) -> tuple[int, int, int]:
    """docker push, streamed; returns the layers uploaded, mounted from another repository, present."""
    uploaded = mounted = present = 0
    try:
        for event in client.api.push(str(repo), tag=tag, auth_config=_auth(repo.credentials), stream=True, decode=True):
            if "error" in event:
                message = event.get("errorDetail", {}).get("message") or event["error"]
                if "denied" in message or "unauthorized" in message or "authentication required" in message:
                    raise Refused(f"""
                        The registry {repo.host} refused the push of {repo}:{tag} ({message}). Give
                        credentials that may push there (username/password inputs, TRITON_RELEASE_USERNAME
                        and TRITON_RELEASE_PASSWORD, or `docker login {repo.host}`).""")
                raise InfrastructureError(f"""
                    The push of {repo}:{tag} failed ({message}); no tag points at a partial image. Run
                    the push again when the registry is back: layers already uploaded are not sent again.""")
            status = event.get("status", "")
            if status == "Pushed":
                uploaded += 1
            elif status.startswith("Mounted from"):
                mounted += 1
            elif status == "Layer already exists":
                present += 1
    except (docker.errors.APIError, requests.RequestException) as exc:
        raise InfrastructureError(f"The Docker daemon failed while pushing {repo}:{tag}: {exc}") from None
    return uploaded, mounted, present


def retain(repo: RegistryRepository, keep: int, channel: str) -> list[str]:
    """Delete the oldest releases beyond `keep`, never one a moving tag or the channel points at."""
    if keep < 1:
        raise UsageError("--keep must be 1 or more (without it every release is kept).")
    tags = repo.tags()
    releases = release_versions(tags)
    if len(releases) <= keep:
        return []
    protected = {repo.digest(t) for t in tags if not RELEASE_TAG.match(t) and not t.startswith("sha-")}
    protected.add(repo.digest(channel))
    deleted = []
    for version in releases[:-keep]:
        digest = repo.digest(str(version))
        if digest and digest not in protected:
            repo.delete(digest)
            deleted.append(str(version))
    return deleted


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


def release_manifest(repo: RegistryRepository, version: str) -> Manifest:
    parse_version(version, "--to-version")
    manifest = repo.manifest(version)
    if manifest is None:
        known = release_versions(repo.tags())
        target = parse_version(version)
        nearest = sorted(known, key=lambda v: (abs(v.major - target.major), abs(v.minor - target.minor),
                                               abs(v.patch - target.patch)))[:3]
        listed = ", ".join(str(v) for v in sorted(nearest)) or "none: the repository has no release"
        raise Refused(f"{repo}:{version} does not exist, so there is nothing to roll back to. "
                      f"Nearest releases: {listed}.")
    return manifest


def rollback(repo: RegistryRepository, version: str, channel: str = "latest", verify=None) -> Rollback:
    """Point `channel` at release `version` by a manifest PUT; `verify(image)` runs first when given."""
    manifest = release_manifest(repo, version)
    before = repo.digest(channel)
    golden = verify(f"{repo}:{version}") if verify else {}
    repo.put_manifest(channel, manifest)
    return Rollback(str(repo), channel, version, manifest.digest, before, verify is not None, golden)


def rollback_model(server: str, model: str, version: int) -> dict:
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
    return {"server": server, "model": model, "version": version, "version_policy_before": before}
