"""Build: the environments the image is built on, the models whose environment changed, and the
release image itself."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.contract import (
    BASE_LABEL,
    CHANNEL_LABEL,
    CREATED_LABEL,
    ENVIRONMENTS_LABEL,
    MODELS_LABEL,
    PYTHON_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    STUB_LABEL,
    VERSION_LABEL,
)
from triton_release.errors import TritonReleaseError
from triton_release.history.git import Git
from triton_release.image.prepared import Prepared
from triton_release.models.repository import Repository
from triton_release.problems import display_path
from triton_release.settings import ImageOptions

if TYPE_CHECKING:
    import docker

    from triton_release.image.base import BaseImage
    from triton_release.image.build import BuildResult, LayersOut
    from triton_release.image.environments import Environments
    from triton_release.image.stub import StubChoice
    from triton_release.image.warmup import Warmup
    from triton_release.registry.client import RegistryRepository


# -- build ------------------------------------------------------------------------------------


def environments(
    root: Path | Repository,
    image: ImageOptions | str,
    *,
    registry: RegistryRepository | None = None,
    previous: str | None = None,
    inspected: BaseImage | None = None,
    room_checked: bool = False,
) -> Prepared:
    """Inspect the base, choose the stub, and resolve each model's requirements into its own
    environment, as `image` says (a base image alone: its defaults); with `registry` and
    `previous`, name the models whose environment changed since that release (its image's label).
    With `inspected`, the base as the cache knows it while it is pulled (image/pull.py): neither
    inspected again nor its disk checked again (the pull's start checked it); with `room_checked`,
    the daemon's disk was checked already (release.py's start_pull), so it is not checked twice."""
    from triton_release.image import base as baseimage
    from triton_release.image import stub
    from triton_release.image.engine import docker_client
    from triton_release.image.environments import resolve

    options = image if isinstance(image, ImageOptions) else ImageOptions(image)
    repo = root if isinstance(root, Repository) else Repository.load(root)
    if inspected is None:
        client = docker_client()
        if not room_checked:
            room_for(client, options.base_image, repo.root)
        base = baseimage.inspect(client, options.base_image)
    else:
        base = inspected
    baseimage.require_backends(base, repo)  # before a build: a server would only fail to load them
    choice = stub.choose(base, options.python, options.stub, options.stub_sources or "")
    envs = resolve(repo, base.pythons[choice.target_python], base.glibc, options=options.requirements_options)
    for model, env in sorted(envs.by_model.items()):
        stub.refuse_numpy2(
            choice,
            env.packages.get("numpy", ""),
            f"model {model}'s environment",
            f"numpy<2 in {display_path(env.requirements)}",
        )
    if registry is None or previous is None:
        return Prepared(base, choice, envs)
    labels = registry.image_config(previous).get("config", {}).get("Labels") or {}
    changed = [m for m in envs.changed_since(labels.get(ENVIRONMENTS_LABEL)) if m in repo]
    return Prepared(base, choice, envs, tuple(changed), f"{registry}:{previous}", dict(labels))


def room_for(client: docker.DockerClient, image: str, root: Path) -> None:
    """Refuse, before the base is pulled, a daemon whose free disk cannot hold the base and the
    release (image/disk.py), naming the numbers; a figure the daemon or registry cannot give is
    left to the pull itself, which says what is wrong."""
    import docker as docker_sdk
    import requests

    from triton_release.image import disk
    from triton_release.registry.sizes import pull_size

    compressed = None
    try:
        client.images.get(image)
    except docker_sdk.errors.ImageNotFound:
        try:
            compressed = pull_size(image, os.environ)
        except TritonReleaseError:
            return
    except (docker_sdk.errors.APIError, requests.RequestException):
        return
    needed = disk.need(compressed, disk.folder_bytes(root))
    disk.refuse_if_short(disk.daemon_free(client, os.environ, [image]), needed, image)


@dataclass(frozen=True)
class ReleaseImage:
    """The built image and the decisions behind it."""

    build: BuildResult
    prepared: Prepared
    warnings: tuple[str, ...]
    warmup: Warmup | None = None  # warmup: golden: the model_warmup written into the image's configs

    @property
    def image_id(self) -> str:
        return self.build.image_id

    @property
    def base(self) -> BaseImage:
        return self.prepared.base

    @property
    def stub(self) -> StubChoice:
        return self.prepared.stub

    @property
    def environments(self) -> Environments:
        return self.prepared.environments

    def summary(self) -> str:
        envs = self.environments
        extra = (
            f", {len(envs.by_model)} model environments of {len(envs.distributions)} distributions"
            if envs.by_model
            else ""
        )
        return (
            f"{self.build.tag}: built FROM {self.base.image}, {len(self.build.layers)} layers "
            f"({self.build.sent} sent to the daemon){extra}; "
            f"{self.stub.summary()}"
        )

    def to_json(self) -> dict:
        return {
            **self.build.to_json(),
            "stub": self.stub.to_json(),
            "base": self.base.to_json(),
            "environments": self.environments.to_json(),
            "warnings": list(self.warnings),
            **({"warmup": self.warmup.to_json()} if self.warmup is not None else {}),
        }


def build(
    root: Path | Repository,
    image: ImageOptions | str,
    tag: str,
    *,
    revision: str | None = None,
    source: str = "",
    version: str = "",
    bumped_from: str | None = None,
    channel: str = "",
    prepared: Prepared | None = None,
    extra_labels: dict[str, str] | None = None,
    blob_ids: Mapping[str, str] | None = None,
    layers_out: LayersOut | None = None,
) -> ReleaseImage:
    """Inspect the base, choose the stub, resolve the environments (unless `prepared`), build as
    `image` says (a base image alone: its defaults), and prove the stub loads. `revision`: the
    commit built (default: the git HEAD around the model repository, if any). `extra_labels`: more
    labels for the image (a staged candidate's plan). `blob_ids`: files known to hold their
    committed content (`Export.blob_ids`). Its `warmup` "golden": the image's config copies get
    model_warmup from the golden inputs (image/warmup.py). `layers_out`: where the new layers'
    tars are left, and whom to tell once they are written (the upload beside the load and the tests)."""
    from triton_release.image import environments as envs_in_image
    from triton_release.image import stub
    from triton_release.image.build import build_image
    from triton_release.image.engine import docker_client
    from triton_release.image.layers import Runtime

    repo = root if isinstance(root, Repository) else Repository.load(root)
    if revision is None:
        found = Git(repo.root).run("rev-parse", "HEAD", check=False)
        revision = found.stdout.decode().strip() if found.returncode == 0 else ""
    options = image if isinstance(image, ImageOptions) else ImageOptions(image)
    client = docker_client()
    if prepared is None:
        prepared = environments(repo, options)
    if prepared.stub.build is not None and prepared.stub.stub_file is None:
        from triton_release.image.compiler import compile_stub

        compiled = compile_stub(client, prepared.stub.build)
        prepared = replace(prepared, stub=replace(prepared.stub, stub_file=compiled.path, compiled=compiled.compiled))
    base, choice, envs = prepared.base, prepared.stub, prepared.environments
    install = base.pythons[choice.target_python]
    warnings = list(choice.warnings)
    labels = {
        CREATED_LABEL: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        REVISION_LABEL: revision,
        BASE_LABEL: bumped_from or "",
        CHANNEL_LABEL: channel,
        SOURCE_LABEL: source,
        VERSION_LABEL: version,
        MODELS_LABEL: json.dumps({m.name: list(m.versions) for m in repo}, sort_keys=True),
        ENVIRONMENTS_LABEL: envs.label() if envs.by_model else "",
        PYTHON_LABEL: choice.target_python,
        STUB_LABEL: f"{choice.provider}: {choice.origin}",
        **(extra_labels or {}),
    }
    items, configs = envs_in_image.environment_items(envs, repo)
    warmed = None
    if options.warmup == "golden":
        from triton_release.image.warmup import with_warmup

        configs, warmed = with_warmup(repo, configs)
        warnings += [f"{model}: no model_warmup written (warmup: golden): {why}" for model, why in warmed.left_out]
    runtime = Runtime(choice.stub_file, extra=tuple(items), model_files=configs)
    built = build_image(
        repo,
        options.base_image,
        tag,
        {k: v for k, v in labels.items() if v},
        client=client,
        runtime=runtime,
        max_layers=options.max_layers,
        base_layers=base.layers or None,
        blob_ids=blob_ids,
        layers_out=layers_out,
    )
    stub.check_built(client, tag, choice, install)  # a container's ldd, unless the stock stub is kept
    return ReleaseImage(built, prepared, tuple(warnings), warmed)
