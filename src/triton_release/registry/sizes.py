"""An image's download size as its registry lists it, read without pulling it: the compressed
layers of its linux/amd64 manifest (the platform the action and NVIDIA's x86 images run on)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from docker.utils import parse_repository_tag

from triton_release.errors import InfrastructureError
from triton_release.registry.client import open_repository

PLATFORM = {"os": "linux", "architecture": "amd64"}


def pull_size(image: str, env: Mapping[str, str]) -> int:
    """The bytes a pull of `image` downloads. InfrastructureError (or Refused) when the registry does
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
        manifest = registry.manifest(str(chosen.get("digest", "")))
        if manifest is None:
            raise InfrastructureError(f"The registry lists a linux/amd64 image of {image} it does not hold.")
        body = json.loads(manifest.body)
    sizes = [entry.get("size") for entry in [*body.get("layers", []), body.get("config") or {}]]
    return sum(size for size in sizes if isinstance(size, int) and size > 0)
