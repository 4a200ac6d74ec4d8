"""An image as its registry lists it, read without pulling it: the compressed layers of its
linux/amd64 manifest (the platform the action and NVIDIA's x86 images run on), and its image
configuration (environment and labels), which say its Triton release (image/ngc.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from docker.utils import parse_repository_tag

from triton_release.errors import InfrastructureError
from triton_release.registry.client import content_digest, open_repository

if TYPE_CHECKING:
    from triton_release.image.ngc import Release
    from triton_release.registry.client import RegistryRepository

PLATFORM = {"os": "linux", "architecture": "amd64"}
CONFIG_LIMIT = 1 << 20  # bytes: an image configuration is a few KiB; anything past this is not read


@dataclass(frozen=True)
class Listing:
    """The linux/amd64 image of a tag, as its manifest lists it."""

    image: str
    size: int  # the bytes a pull downloads: the compressed layers and the config
    config_digest: str
    registry: RegistryRepository = field(repr=False)

    def config(self) -> dict:
        """The image configuration, read up to CONFIG_LIMIT and checked against its digest."""
        body = self.registry.small_blob(self.config_digest, CONFIG_LIMIT)
        try:
            found = json.loads(body)
        except ValueError:
            found = None
        if not isinstance(found, dict):
            raise InfrastructureError(f"The image configuration of {self.image} in its registry is not a JSON object.")
        return found

    def release(self) -> Release:
        """The Triton release the image's configuration says (its Env and Labels)."""
        from triton_release.image.ngc import environment, from_config

        config = self.config().get("config") or {}
        labels = config.get("Labels") if isinstance(config, dict) else None
        env = config.get("Env") if isinstance(config, dict) else None
        return from_config(
            environment(env if isinstance(env, list) else None),
            {k: v for k, v in labels.items() if isinstance(v, str)} if isinstance(labels, dict) else {},
        )


def listing(image: str, env: Mapping[str, str]) -> Listing:
    """What the registry lists for `image`. InfrastructureError (or Refused) when the registry does
    not say: the image is missing, the registry unreachable, or the credentials refused."""
    repository, tag = parse_repository_tag(image)
    reference = tag or "latest"
    registry = open_repository(repository, env)
    manifest = registry.manifest(reference)
    if manifest is None:
        raise InfrastructureError(f"The registry has no {image}: check the name and the tag.")
    body = json.loads(manifest.body)
    if "manifests" in body:  # an index: the linux/amd64 image
        chosen = next(
            (
                entry
                for entry in body["manifests"]
                if all((entry.get("platform") or {}).get(key) == value for key, value in PLATFORM.items())
            ),
            None,
        )
        if chosen is None:
            raise InfrastructureError(f"{image} has no linux/amd64 image, the platform the release runs on.")
        digest = str(chosen.get("digest", ""))
        manifest = registry.manifest(digest)
        if manifest is None:
            raise InfrastructureError(f"The registry lists a linux/amd64 image of {image} it does not hold.")
        if content_digest(manifest.body) != digest:
            raise InfrastructureError(
                f"The registry's linux/amd64 manifest of {image} does not match its digest {digest}."
            )
        body = json.loads(manifest.body)
    sizes = [entry.get("size") for entry in [*body.get("layers", []), body.get("config") or {}]]
    config = body.get("config") or {}
    return Listing(
        image,
        sum(size for size in sizes if isinstance(size, int) and size > 0),
        str(config.get("digest", "")) if isinstance(config, dict) else "",
        registry,
    )


def pull_size(image: str, env: Mapping[str, str]) -> int:
    """The bytes a pull of `image` downloads (see `listing`)."""
    return listing(image, env).size


def config_digest(image: str, env: Mapping[str, str]) -> str:
    """The digest of `image`'s config as its registry names it: the id the Docker daemon gives the
    image once pulled (`listing`'s errors when the registry does not say)."""
    return listing(image, env).config_digest
