"""The candidate: the staged image in the release repository, under `candidate-<sha12>` and named
by its digest everywhere else (`REPO@sha256:...`).

Its layers go up through the Docker daemon as a release's do (`registry/publish.py`), to the
candidate tag only: never an X.Y.Z, never a channel. It carries its plan as labels (the version
it would be released as, the changed models, the shards), so every later stage reads the plan
from the image itself. A test job pulls it by digest and checks that the daemon holds exactly
that manifest before serving it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import docker
import requests

from triton_release import __version__
from triton_release.contract import (
    BASE_LABEL,
    BUILD_INPUTS_LABEL,
    CHANGED_LABEL,
    REVISION_LABEL,
    SHARDS_LABEL,
    candidate_tag,
    parse_digest_ref,
    same_repository,
)
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.image.engine import docker_client
from triton_release.models.shards import (
    Shard,
    build_inputs_from_label,
)
from triton_release.registry.candidate.labels import Candidate
from triton_release.registry.client import RegistryRepository
from triton_release.registry.publish import daemon_push, pushed_digests
from triton_release.settings import ImageOptions, PublishOptions

log = logging.getLogger("triton_release")


@dataclass(frozen=True)
class Staged:
    """The candidate a stage left in the registry: pushed now, or found from an earlier run."""

    candidate: Candidate
    tag: str
    reused: bool = False  # staged before for the same commit and base: not built again
    layers_uploaded: int = 0
    layers_present: int = 0

    @property
    def ref(self) -> str:
        return self.candidate.ref

    def to_json(self) -> dict:
        c = self.candidate
        return {
            "candidate": c.ref,
            "tag": f"{c.repository}:{self.tag}",
            "version": c.version,
            "revision": c.revision,
            "base": c.base or None,
            "changed": list(c.changed),
            "shards": [s.to_json() for s in c.shards],
            "reused": self.reused,
            "layers_uploaded": self.layers_uploaded,
            "layers_already_present": self.layers_present,
        }

    def facts(self) -> dict:
        return {
            "candidate": self.ref,
            "version": self.candidate.version or None,
            "shards": [s.matrix_entry() for s in self.candidate.shards],
            "released": False,
        }


def build_inputs(image: ImageOptions, publish: PublishOptions, *, base_image_id: str, source: str) -> dict:
    """Every input of a stage's build besides the commit and the base of its bump: the base image
    (by its id, whatever name it was given by), the stub provider (a stub file by its content), the
    target Python, the settings that shape the layers and the environments, the labels given, and
    this tool's version. A candidate is reused only when all of them are what it was built from."""
    stub = image.stub
    inputs: dict = {
        "base_image_id": base_image_id,
        "stub": stub,
        "python": image.python or "",
        "requirements_options": image.requirements_options,
        "max_layers": image.max_layers,
        "channel": publish.channel,
        "source": source,
        "triton_release": __version__,
    }
    if image.warmup != "off":  # only when on: candidates staged before warmup existed still match
        inputs["warmup"] = image.warmup
    if stub.startswith("path:"):
        try:
            inputs["stub_sha256"] = hashlib.sha256(Path(stub.removeprefix("path:")).read_bytes()).hexdigest()
        except OSError:
            inputs["stub_sha256"] = ""  # the build says what is wrong with the file
    return inputs


def differences(built_from: dict | None, inputs: dict) -> list[str]:
    """The build inputs a candidate was built with that differ from `inputs`, as `key was -> now`;
    one entry when the candidate does not say what it was built from."""
    if built_from is None:
        return [f"it does not say what it was built from (no {BUILD_INPUTS_LABEL} label)"]
    return [
        f"{key} {built_from.get(key, '(none)')!s:.80} -> {inputs.get(key, '(none)')!s:.80}"
        for key in sorted(set(built_from) | set(inputs))
        if built_from.get(key) != inputs.get(key)
    ]


def find_reusable(
    registry: RegistryRepository, revision: str, base: str | None, inputs: dict | None = None
) -> Staged | None:
    """The candidate staged before for this commit from the same base and the same build `inputs`
    (`build_inputs`: so the same image); None when there is none, or it was staged from another
    base, of other inputs, or by something else. Without `inputs`, none is reused."""
    tag = candidate_tag(revision)
    manifest = registry.manifest(tag)
    if manifest is None:
        return None
    config = registry.image_config(manifest.digest)
    labels = (config.get("config") or {}).get("Labels") or {}
    if labels.get(REVISION_LABEL) != revision or labels.get(BASE_LABEL, "") != (base or ""):
        return None
    if SHARDS_LABEL not in labels or CHANGED_LABEL not in labels or inputs is None:
        return None
    changed = differences(build_inputs_from_label(labels.get(BUILD_INPUTS_LABEL)), inputs)
    if changed:
        log.warning(
            f"{registry}:{tag} was staged from this commit with other build inputs ({'; '.join(changed)}): "
            f"it is built again, and {tag} moves to the new candidate; the records of "
            f"{registry}@{manifest.digest} do not count for it"
        )
        return None
    try:
        candidate = Candidate.from_labels(
            str(registry), manifest.digest, labels, str(config.get("created", "")), manifest
        )
    except Refused:
        return None
    return Staged(candidate, tag, reused=True)


def push_candidate(
    image: str, registry: RegistryRepository, revision: str, *, client: docker.DockerClient | None = None
) -> Staged:
    """Push the local `image` (built with the plan's labels) to candidate-<sha12> through the daemon
    (`client`, by default the one at DOCKER_HOST); the tag is read back, and must name the manifest
    the daemon wrote."""
    client = client or docker_client()
    tag = candidate_tag(revision)
    try:
        local = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(f"{image}: no such image on this Docker host; stage it again.") from None
    local.tag(str(registry), tag)
    try:
        uploaded, mounted, present, pushed = daemon_push(client, registry, tag)
    finally:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(f"{registry}:{tag}")  # only the extra name; the image stays
    if not pushed:
        local.reload()
        found = pushed_digests(local, registry)
        pushed = found.pop() if len(found) == 1 else ""
    digest = registry.digest(tag)
    if not pushed or digest != pushed:
        wrote = pushed or "the manifest the Docker daemon wrote"
        raise InfrastructureError(f"""
            {registry}:{tag} is {digest or "missing"} after the push, not {wrote}: another stage of the
            same commit may have pushed meanwhile. Stage it again.""")
    candidate = Candidate.from_labels(str(registry), digest, local.labels or {}, local.attrs.get("Created", ""))
    return Staged(candidate, tag, False, uploaded + mounted, present)


@dataclass(frozen=True)
class Pulled:
    """An image pulled by digest, the daemon holding exactly that manifest."""

    ref: str
    image_id: str
    revision: str
    candidate: Candidate | None  # None: not staged by `stage` (no shard plan in its labels)

    def shard(self, name: str) -> Shard:
        shards = self.candidate.shards if self.candidate is not None else ()
        for shard in shards:
            if shard.name == name:
                return shard
        known = ", ".join(s.name for s in shards) or "none (it was not staged by `triton-release stage`)"
        raise UsageError(f"""
            {self.ref} has no shard {name}; its shards are {known}: see the stage's `shards` output.""")

    def facts(self) -> dict:
        """A staged candidate's changed models, so that a shard's test reports them as the stage
        and the promote do (one staged before the label: the models it tests)."""
        if self.candidate is None:
            return {}
        found = self.candidate.changed_models
        return {"changed_models": sorted(found if found is not None else self.candidate.changed)}

    def to_json(self) -> dict:
        return {
            "candidate": self.ref,
            "image_id": self.image_id,
            "revision": self.revision,
            "version": self.candidate.version if self.candidate is not None else None,
        }


def pull_candidate(registry: RegistryRepository, digest: str, *, client: docker.DockerClient | None = None) -> Pulled:
    """Pull REPO@sha256:... through the daemon (`client`, by default the one at DOCKER_HOST) and
    check that it holds that very manifest (its RepoDigests); anything else is refused before a
    server starts."""
    client = client or docker_client()
    ref = f"{registry}@{digest}"
    credentials = registry.credentials
    try:
        image = client.images.pull(
            str(registry), tag=digest, auth_config=credentials.docker_auth() if credentials else None
        )
    except docker.errors.NotFound:
        raise Refused(f"""
            {ref} is not in the registry: the candidate was deleted, or the digest is wrong. Use the stage's
            `candidate` output, or stage the commit again.""") from None
    except (docker.errors.APIError, requests.RequestException) as exc:
        explanation = str(getattr(exc, "explanation", None) or exc)
        if "denied" in explanation or "unauthorized" in explanation:
            raise Refused(f"""
                The registry {registry.host} refused the pull of {ref} ({explanation}). Give credentials that
                may pull there (username/password inputs, TRITON_RELEASE_USERNAME and TRITON_RELEASE_PASSWORD,
                or `docker login {registry.host}`).""") from None
        raise InfrastructureError(
            f"Could not pull {ref} ({explanation}). Run the test again when the registry is back."
        ) from None
    held = filter(None, map(parse_digest_ref, image.attrs.get("RepoDigests") or []))
    if not any(same_repository(repository, str(registry)) and found == digest for repository, found in held):
        raise Refused(f"""
            The Docker daemon pulled {ref}, but the image it holds is not that manifest (its digests:
            {", ".join(image.attrs.get("RepoDigests") or []) or "none"}); it was not tested.""")
    labels = image.labels or {}
    candidate = None
    if SHARDS_LABEL in labels:
        candidate = Candidate.from_labels(str(registry), digest, labels, image.attrs.get("Created", ""))
    return Pulled(ref, image.id, labels.get(REVISION_LABEL, ""), candidate)
