"""Push under the immutable X.Y.Z, move the other tags, keep or prune releases, roll back.

A release's layers go up while its image is loaded and tested (registry/upload.py): the push then
uploads the image's config and puts the manifest naming them under X.Y.Z, its digest the sha256 of
the bytes it sent. When that upload could not make the whole image (a first release, a layer
without a blob, an error), layers go up through the Docker daemon instead (it uploads only the
blobs the registry lacks). Either way the manifest is written last, so a tag never points at a
partial image. Every other tag is a registry-side retag: a manifest PUT, no layer moves. The
channel tag moves last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import requests

from triton_release import contract, progress
from triton_release.contract import (
    CHANNEL_LABEL,
    CREATED_LABEL,
    REVISION_LABEL,
    is_moving_tag,
    is_provenance_tag,
    is_release_tag,
    moving_tags,
    parse_digest_ref,
    same_repository,
)
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history.releases import parse_version, versions_in
from triton_release.registry import ledger
from triton_release.registry.client import RegistryRepository
from triton_release.registry.rollback import rolled_back_since
from triton_release.registry.upload import BackgroundUpload, Uploaded, image_manifest
from triton_release.registry.write_once import TagNotOverwritable

if TYPE_CHECKING:
    import docker

    from triton_release.registry.client import Manifest


class AlreadyReleased(Refused):
    """X.Y.Z exists with other contents: nothing of this release was published."""

    already_released = True


class LostRace(AlreadyReleased):
    """Another release wrote X.Y.Z after this one did: this release's X.Y.Z is not in the registry."""


@dataclass(frozen=True)
class PushResult:
    """The immutable X.Y.Z in the registry: from here on the release is published."""

    repository: str
    version: str
    digest: str
    layers_uploaded: int  # sent to the registry
    layers_mounted: int  # already in the registry under another repository: linked, not sent
    layers_present: int  # already in this repository
    pushed_by: str = "daemon"  # "registry": its layers went up during the tests, the manifest written here
    uploaded_during_tests: Uploaded | None = None  # what the upload beside the tests did, when one ran
    credentials_source: str | None = None  # where the registry credentials came from; None: anonymous

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "version": self.version,
            "digest": self.digest,
            "image": f"{self.repository}:{self.version}",
            "layers_uploaded": self.layers_uploaded,
            "layers_mounted": self.layers_mounted,
            "layers_already_present": self.layers_present,
            "pushed_by": self.pushed_by,
            "uploaded_during_tests": self.uploaded_during_tests.to_json() if self.uploaded_during_tests else None,
            "credentials_source": self.credentials_source,
        }

    def facts(self) -> dict:
        return released_facts(self.repository, self.version, self.digest)


def released_facts(repository: str, version: str, digest: str) -> dict:
    """The report's facts (and the action's outputs) of a published release: pushed or promoted."""
    return {"version": version, "image": f"{repository}:{version}", "digest": digest, "released": True}


@dataclass(frozen=True)
class Tagged:
    """The moving tags pointed at a release: X.Y, X, sha-<12 hex>, the channel last."""

    repository: str
    version: str
    tags: tuple[str, ...]
    channel_before: str | None  # the digest the channel pointed at before: roll forward with it
    previous_version: str | None = None  # the release before this one in the registry, X.Y.Z ...
    previous_digest: str | None = None  # ... and its manifest digest: roll back to it

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "version": self.version,
            "tags": list(self.tags),
            "channel_digest_before": self.channel_before,
            "previous_version": self.previous_version,
            "previous_digest": self.previous_digest,
        }

    def facts(self) -> dict:
        return {"previous_version": self.previous_version, "previous_digest": self.previous_digest}


def push(
    image: str,
    registry: RegistryRepository,
    version: str,
    *,
    client: docker.DockerClient | None = None,
    upload: BackgroundUpload | None = None,
) -> PushResult:
    """Push the local `image` as X.Y.Z: with `upload` (its layers sent during the tests) by
    uploading its config and putting its manifest, else (or when the upload lacks a layer) through
    the Docker daemon (`client`, default the one at DOCKER_HOST); an X.Y.Z of other contents is
    refused before any upload, the same image pushed before (an interrupted run) is resumed.

    A registry has no conditional PUT: two releases racing for X.Y.Z can both write it, the last
    write winning. So once the push is done X.Y.Z is read back, and unless it is the manifest this
    push wrote (its digest: of the bytes sent, or as the daemon computed it) the release is
    refused: another one won, and since the caller moves the other tags only after this returns,
    none of them moves."""
    import docker

    from triton_release.image.engine import docker_client

    parse_version(version)
    client = client or docker_client()
    try:
        local = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(f"{image}: no such image on this Docker host; build it with `triton-release build`.") from None
    sending = False  # whether this push has begun to send X.Y.Z's manifest (itself or through the daemon)
    try:
        written, config = _our_manifest(local, upload)  # None: through the daemon
        there = registry.manifest(version)
        existing = there.digest if there is not None else None
        ours = pushed_digests(local, registry) | ({written.digest} if written is not None else set())
        if there is not None and there.config_digest == local.id:  # this very image, however it went up
            ours.add(there.digest)
        if existing is not None and existing not in ours:
            raise AlreadyReleased(f"""
                {registry}:{version} already exists, and released versions are immutable: nothing was pushed.
                Release the next version (the previous release is read from the registry's tags).""")
        if existing is None:
            local.tag(str(registry), version)
            direct = written is not None and upload is not None and _config_sent(upload, config)
            # the build entered before its manifest is put (the manifest's digest too, where this push
            # writes it, not the daemon): a run stopped in between is still proven ours
            revision = str(local.labels.get(REVISION_LABEL) or "")
            ledger.intend(registry, version, revision, local.id, written.digest if direct and written else "")
            if direct and written is not None and upload is not None:
                uploaded, mounted, present = upload.sent, 0, upload.reused
                sending = True
                pushed = put_release(registry, version, written)
                upload.referenced = True
            else:
                sending = True
                uploaded, mounted, present, pushed = daemon_push(client, registry, version)
            if not pushed:  # a daemon that did not say: what it recorded for the image
                local.reload()
                found = pushed_digests(local, registry)
                pushed = found.pop() if len(found) == 1 else ""
            if not pushed:
                raise InfrastructureError(f"""
                    The Docker daemon pushed {registry}:{version} but did not say which manifest it wrote, so
                    it cannot be told from a rival release's. Check that {registry}:{version} is this image
                    (docker pull), then rerun: the same image is resumed, another is refused.""")
        else:  # this very image went up before and the run stopped: resume
            pushed = existing
            resumed = registry.manifest(version)
            assert resumed is not None
            uploaded, mounted, present = 0, 0, len(resumed.layers)
    except (InfrastructureError, Refused) as exc:
        if not sending and manifest_sent(exc) is None:  # failed before any manifest of it was sent
            exc.manifest_sent = False  # type: ignore[union-attr]
        raise
    digest = registry.digest(version)  # read back: the manifest X.Y.Z names now, by its bytes
    if digest != pushed:
        raise LostRace(f"""
            {registry}:{version} is {digest or "gone"}, not {pushed} that this release pushed: another
            release won the race for {version}, and no other tag was moved. Run the release again: it
            releases the next version.""")
    ledger.enter(registry, version, local.labels, local.id, digest)  # X.Y.Z is ours: issued, never again
    by = "resumed" if existing is not None else "registry" if upload is not None and upload.referenced else "daemon"
    return PushResult(
        str(registry),
        version,
        digest,
        uploaded,
        mounted,
        present,
        by,
        upload.result() if upload else None,
        registry.credentials.source if registry.credentials else None,
    )


def put_release(registry: RegistryRepository, version: str, manifest: Manifest) -> str:
    """Write X.Y.Z, once: the push checked it absent, so a write-once repository's refusal to
    overwrite it means another release wrote it meanwhile (the race is lost, as below)."""
    try:
        return registry.put_manifest(version, manifest)
    except TagNotOverwritable:
        raise LostRace(f"""
            {registry}:{version} was written by another release while this one pushed (the repository
            refused to overwrite it): nothing of this release was tagged. Run the release again: it
            releases the next version.""") from None


def _our_manifest(local: docker.models.images.Image, upload: BackgroundUpload | None) -> tuple[Manifest | None, bytes]:
    """The manifest of `local` naming the blobs `upload` sent during the tests (waiting for it to
    end), and its config; None when the push must go through the daemon (no upload, a layer
    without a blob, the image's config not kept here: the reason kept in the upload's result)."""
    from triton_release.image.assemble import config_of

    if upload is None:
        return None, b""
    layers = upload.layers(local.attrs["RootFS"]["Layers"])
    if layers is None:
        return None, b""
    config = config_of(local.id)
    if config is None:
        upload.missing = "the image's config was not put together on this machine"
        return None, b""
    return image_manifest(config, layers), config


def _config_sent(upload: BackgroundUpload, config: bytes) -> bool:
    """Upload the image's config (the release's labels: after the tests); False, the reason kept,
    when that failed: the daemon pushes instead."""
    try:
        upload.registry.put_blob(config)
    except (InfrastructureError, Refused) as exc:
        upload.missing = f"the config's upload failed: {exc}"
        return False
    return True


def published(registry: RegistryRepository, version: str) -> bool | None:
    """Whether X.Y.Z is in the registry; None when the registry cannot say."""
    try:
        return registry.digest(version) is not None
    except (InfrastructureError, Refused):
        return None


def tag_release(
    registry: RegistryRepository,
    version: str,
    revision: str | None,
    channel: str,
    digest: str | None = None,
    *,
    tags: str = "all",
) -> Tagged:
    """Point X.Y, X, sha-<12> and, last, the channel at release `version`'s manifest (`tags`
    "version": sha-<12> alone, for a write-once repository); with `digest` (the push's), only while
    X.Y.Z is still that manifest. A tag already there is not written again (a write-once repository
    refuses even that). Also reads the release before it (the highest X.Y.Z below it) and its
    digest, the one to roll back to."""
    release = parse_version(version)
    manifest = registry.manifest(version)
    if digest is not None and (manifest is None or manifest.digest != digest):
        raise LostRace(f"""
            {registry}:{version} is {manifest.digest if manifest else "gone"}, not {digest} that this release
            pushed: another release overwrote it, and no other tag was moved. Run the release again: it
            releases the next version.""")
    channel_before = registry.digest(channel)
    earlier = [v for v in versions_in(registry.tags()) if v < release]
    previous = str(earlier[-1]) if earlier else None
    written = moving_tags(release, revision, channel, tags)
    assert manifest is not None
    _point(registry, written, manifest, {channel: channel_before}, f"{version} is released as {manifest.digest}")
    return Tagged(
        str(registry),
        version,
        tuple(written),
        channel_before,
        previous,
        registry.digest(previous) if previous else None,
    )


def _point(
    registry: RegistryRepository, tags: list[str], manifest: Manifest, known: dict[str, str | None], released: str
) -> None:
    """Point each of `tags` at `manifest`, in order, skipping those already there (`known`: digests
    read already). A write-once repository's refusal says what was done before it."""
    for number, tag in enumerate(tags):
        there = known[tag] if tag in known else registry.digest(tag)
        if there == manifest.digest:
            continue
        try:
            registry.put_manifest(tag, manifest)
        except TagNotOverwritable as exc:
            moved = ", ".join(tags[:number]) or "none"
            raise exc.having(
                f"{released}; the tags before {tag} point at it ({moved}), {tag} and those after it "
                f"({', '.join(tags[number:])}) were left where they were."
            ) from None


@dataclass(frozen=True)
class Finished:
    """The moving tags of an interrupted release, pointed at it by a later run."""

    repository: str
    version: str | None
    digest: str | None
    tags: tuple[str, ...]

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "version": self.version,
            "digest": self.digest,
            "finished_tags": list(self.tags),
        }

    def facts(self) -> dict:
        if not self.tags:
            return {}
        return {"version": self.version, "image": f"{self.repository}:{self.version}", "digest": self.digest}


def finish_interrupted(registry: RegistryRepository, channel: str, *, tags: str = "all") -> Finished:
    """Point the newest release's moving tags that still point elsewhere at it, when a run stopped
    after pushing X.Y.Z: X.Y, X and sha-<12> always; the channel unless a rollback moved it there
    after that release was built (a rollback is a decision, not an interruption). With `tags`
    "version", sha-<12> alone."""
    versions = versions_in(registry.tags())
    if not versions:
        return Finished(str(registry), None, None, ())
    newest = str(versions[-1])
    manifest = registry.manifest(newest)
    if manifest is None:  # listed, yet gone (deleted meanwhile): nothing to finish
        return Finished(str(registry), None, None, ())
    labels = registry.image_config(newest).get("config", {}).get("Labels") or {}
    wanted = moving_tags(versions[-1], labels.get(REVISION_LABEL) or None, channel, tags)
    current = {tag: registry.digest(tag) for tag in wanted}
    behind = [tag for tag in wanted if current[tag] != manifest.digest]
    made_for = labels.get(CHANNEL_LABEL)  # None: a release from before the label; then only with X.Y
    if channel in behind and (made_for != channel if made_for is not None else wanted[0] not in behind):
        behind.remove(channel)  # another channel's release, not an interrupted one of this channel
    if channel in behind and rolled_back_since(registry, channel, labels.get(CREATED_LABEL, "")):
        behind.remove(channel)
    if behind:  # only a build this tool pushed is finished
        ledger.check_built_here(registry, newest, manifest.digest, str(labels.get(REVISION_LABEL) or ""))
    _point(registry, behind, manifest, current, f"{newest} is released as {manifest.digest}")
    return Finished(str(registry), newest, manifest.digest, tuple(behind))


def pushed_digests(local: docker.models.images.Image, registry: RegistryRepository) -> set[str]:
    """The manifest digests the Docker daemon recorded for the image `local` in `registry`."""
    found = (parse_digest_ref(ref) for ref in local.attrs.get("RepoDigests") or [])
    return {digest for repository, digest in filter(None, found) if same_repository(repository, str(registry))}


def daemon_push(client: docker.DockerClient, registry: RegistryRepository, tag: str) -> tuple[int, int, int, str]:
    """docker push, streamed; returns the layers uploaded, mounted from another repository, present,
    and the digest of the manifest written (the daemon computes it from the bytes it sends). The
    push shows its progress as it goes: the bytes of the layers sent, of their total."""
    import docker

    auth = registry.credentials.docker_auth() if registry.credentials else None
    try:
        with progress.task("push", unit=progress.BYTES) as bar:
            stream = _PushStream(registry, tag, bar)
            for event in client.api.push(str(registry), tag=tag, auth_config=auth, stream=True, decode=True):
                stream.take(event)
    except (docker.errors.APIError, requests.RequestException) as exc:
        raise InfrastructureError(f"The Docker daemon failed while pushing {registry}:{tag}: {exc}") from None
    return stream.uploaded, stream.mounted, stream.present, stream.digest


def manifest_sent(error: BaseException) -> bool | None:
    """Whether the push that raised `error` may have sent its manifest (PUT X.Y.Z): False when it
    failed while layers were still going up, before the daemon sends any manifest; True when every
    layer was up; None when it cannot tell (the daemon itself stopped answering, no push ran)."""
    return getattr(error, "manifest_sent", None)


class _PushStream:
    """What the daemon's push stream says, event by event: the layers' fates, the manifest's digest,
    and each layer's bytes sent of its size (progressDetail of its "Pushing" events; the size is
    that of the layer's files, so a little more than it can be sent, the tar headers: capped)."""

    def __init__(self, registry: RegistryRepository, tag: str, bar: progress.Task) -> None:
        self.registry, self.tag, self.bar = registry, tag, bar
        self.uploaded = self.mounted = self.present = 0
        self.digest = ""
        self.layers: set[str] = set()  # every layer of the image
        self.sent: dict[str, tuple[int, int]] = {}  # layer -> (bytes sent, size), of those being sent

    @property
    def layers_done(self) -> bool:
        """Whether every layer the daemon announced is in the registry: only then does it send
        the manifest (docker's push uploads all layers first, and stops at the first that fails)."""
        return bool(self.layers) and self.uploaded + self.mounted + self.present >= len(self.layers)

    def take(self, event: dict) -> None:
        if "error" in event:
            failure = self._failure(event.get("errorDetail", {}).get("message") or event["error"])
            failure.manifest_sent = self.layers_done  # type: ignore[attr-defined]
            raise failure
        aux = event.get("aux")
        if isinstance(aux, dict) and aux.get("Tag") == self.tag and aux.get("Digest"):
            self.digest = aux["Digest"]
        status, layer = event.get("status", ""), event.get("id")
        if layer and status in ("Preparing", "Waiting"):
            self.layers.add(layer)
        detail = event.get("progressDetail") or {}
        if status == "Pushing" and layer and detail.get("total"):
            total = int(detail["total"])
            self.sent[layer] = (min(int(detail.get("current") or 0), total), total)
        elif status == "Pushed":
            self.uploaded += 1
            if layer in self.sent:
                self.sent[layer] = (self.sent[layer][1], self.sent[layer][1])
        elif status.startswith("Mounted from"):
            self.mounted += 1
        elif status == "Layer already exists":
            self.present += 1
        else:
            return
        if self.sent:
            done = self.uploaded + self.mounted + self.present
            self.bar.update(
                sum(sent for sent, _ in self.sent.values()),
                total=sum(size for _, size in self.sent.values()),
                detail=f"{done} of {max(len(self.layers), done)} layers done",
            )

    def _failure(self, message: str) -> Exception:
        registry, tag = self.registry, self.tag
        if "immutab" in message.lower() or "cannot be overwritten" in message.lower():  # a write-once repository
            return LostRace(f"""
                {registry}:{tag} was written by another release while this one pushed (the repository
                refused to overwrite it: {message}): nothing of this release was tagged. Run the release
                again: it releases the next version.""")
        if "denied" in message or "unauthorized" in message or "authentication required" in message:
            return Refused(f"""
                The registry {registry.host} refused the push of {registry}:{tag} ({message}). Give
                credentials that may push there (username/password inputs, TRITON_RELEASE_USERNAME
                and TRITON_RELEASE_PASSWORD, or `docker login {registry.host}`).""")
        return InfrastructureError(f"""
            The push of {registry}:{tag} failed ({message}); no tag points at a partial image. Run
            the push again when the registry is back: layers already uploaded are not sent again.""")


@dataclass(frozen=True)
class Retention:
    repository: str
    keep: int
    deleted: tuple[str, ...]  # the releases deleted, X.Y.Z
    dropped: tuple[str, ...] = ()  # the other tags that pointed at them, gone with them
    kept_for: tuple[tuple[str, tuple[str, ...]], ...] = ()  # older releases kept: (X.Y.Z, the channels on it)
    evidence: tuple[str, ...] = ()  # the evidence tags of the deleted releases, deleted

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "keep": self.keep,
            "deleted": list(self.deleted),
            "tags_dropped": list(self.dropped),
            "evidence_deleted": list(self.evidence),
            "kept_as_channel_targets": {version: list(channels) for version, channels in self.kept_for},
        }


def retain(registry: RegistryRepository, keep: int, channel: str) -> Retention:
    """Keep the newest `keep` releases and every release a channel points at; delete the others.

    A channel is any tag outside the tool's own families (X.Y.Z, the moving X.Y and X, sha-<12 hex>,
    candidate-<12 hex>, and the sha256-<hex>.* records and evidence), and `channel` always. X.Y and
    X never keep a release: each release is its own X.Y's target when it is made, so they would
    keep them all. The registry deletes a manifest with every tag on it, so the X.Y, X, sha- and
    candidate tags that pointed at a deleted release go with it: listed in `dropped`, and said."""
    import logging

    from triton_release.contract import is_candidate_tag

    if keep < 1:  # the `keep` setting refuses it; a caller of this function may not have used it
        raise UsageError("--keep must be 1 or more (without it every release is kept).")
    tags = registry.tags()
    releases = versions_in(tags)
    if len(releases) <= keep:
        return Retention(str(registry), keep, ())
    digests = {tag: registry.digest(tag) for tag in tags}
    owned = [
        tag
        for tag in tags
        if is_release_tag(tag)
        or is_moving_tag(tag)
        or is_provenance_tag(tag)
        or is_candidate_tag(tag)
        or contract.is_artifact_tag(tag)
    ]  # shard results and evidence: artifacts of their own, never a release
    channels: dict[str, list[str]] = {}  # digest -> the channels on it
    for tag in sorted({*(set(tags) - set(owned)), channel}):
        digest = digests[tag] if tag in digests else registry.digest(tag)
        if digest:
            channels.setdefault(digest, []).append(tag)
    newest = {digests.get(str(version)) for version in releases[-keep:]}  # a digest two versions share stays
    deleted, gone, kept = [], set(), []
    for version in releases[:-keep]:
        digest = digests.get(str(version))
        if not digest or digest in newest:
            continue
        if digest in channels:
            kept.append((str(version), tuple(channels[digest])))
            continue
        if digest not in gone:
            try:
                registry.delete(digest)
            except Refused as exc:
                raise Refused(f"""
                    {exc.message} Retention (--keep {keep}, the keep setting) needs that permission to delete
                    {version}. The release itself is out: {releases[-1]} is pushed and its tags moved; only
                    the old releases stay. Give credentials that may delete, or leave keep unset.""") from None
            gone.add(digest)
        deleted.append(str(version))
    dropped = tuple(tag for tag in tags if digests.get(tag) in gone and not is_release_tag(tag))
    # a deleted release's evidence goes with it; never a manifest that a kept release's evidence tag
    # names too (the registry deletes by digest: that would delete the kept one's evidence)
    kept_evidence = {digests.get(tag) for tag in tags if contract.evidence_subject(tag) not in (None, *gone)}
    evidence = []
    for tag in tags:
        digest = digests.get(tag)
        if contract.evidence_subject(tag) in gone and digest and digest not in kept_evidence:
            registry.delete(digest)
            evidence.append(tag)
    if dropped:
        them = "it" if len(deleted) == 1 else "them"
        logging.getLogger("triton_release").warning(
            f"--keep {keep} deleted {', '.join(deleted)} from {registry}, and with {them} the tags that pointed "
            f"there: {', '.join(dropped)}. Pull a kept release by its X.Y.Z or a channel."
        )
    return Retention(str(registry), keep, tuple(deleted), dropped, tuple(kept), tuple(evidence))
