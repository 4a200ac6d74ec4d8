"""The build: the context of deterministic layers sent to the daemon's classic builder, the
previous build's layer order kept so the builder's cache holds up to the one changed layer, and
the layer plan kept within `max_layers`, the base image's own layers counted."""

from __future__ import annotations

import errno
import io
import json
import tarfile
import tempfile
from dataclasses import dataclass

import docker

from triton_release.errors import InfrastructureError, Refused, no_space
from triton_release.image.engine import docker_client
from triton_release.image.layers import ORDER_LABEL, Layer, Runtime, write_context
from triton_release.models.repository import Repository


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    base_image: str
    layers: tuple[Layer, ...]

    def to_json(self) -> dict:
        return {"tag": self.tag, "image_id": self.image_id, "base_image": self.base_image,
                "layers": [layer.to_json() for layer in self.layers]}


def previous_order(client: docker.DockerClient, tag: str) -> list[list[str]]:
    """The layer order of the image last built under `tag` on this daemon, if any."""
    try:
        return json.loads(client.images.get(tag).labels.get(ORDER_LABEL) or "[]")
    except (docker.errors.ImageNotFound, ValueError):
        return []


def base_layer_count(client: docker.DockerClient, base_image: str) -> int:
    """The layers of `base_image` on this daemon (pulled if absent)."""
    from triton_release.image.base import image_id, layer_count

    return layer_count(client, image_id(client, base_image))


def build_image(repo: Repository, base_image: str, tag: str, labels: dict[str, str] | None = None,
                models: list[str] | None = None, client: docker.DockerClient | None = None,
                runtime: Runtime = Runtime(), *, max_layers: int = 120,
                base_layers: int | None = None) -> BuildResult:
    """Build `tag` FROM `base_image` with the repository's models (all, or `models`) and the
    runtime's items, in at most `max_layers` layers. `base_layers`: the base image's own layer
    count (default: looked up on the daemon)."""
    client = client or docker_client()
    if base_layers is None:
        base_layers = base_layer_count(client, base_image)
    with tempfile.TemporaryFile() as context:
        try:
            layers = write_context(context, repo, base_image, models, runtime, previous_order(client, tag),
                                   max_layers=max_layers, base_layers=base_layers)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise no_space(tempfile.gettempdir(), "writing the build context") from None
        context.seek(0)
        labels = {**(labels or {}), ORDER_LABEL: json.dumps([[layer.name, layer.digest] for layer in layers])}
        try:
            image, _ = client.images.build(fileobj=context, custom_context=True, tag=tag, labels=labels,
                                           rm=True, forcerm=True, pull=False)
        except docker.errors.BuildError as exc:
            log = "".join(chunk.get("stream", "") + chunk.get("error", "") for chunk in exc.build_log)
            if "pull access denied" in log or ("not found" in log.lower() and base_image in log):
                raise Refused(f"""
                    The base image {base_image} is neither present nor pullable. Pull it first,
                    or give another with --base-image.""", details=log.splitlines()[-5:]) from None
            if "max depth exceeded" in log:
                raise Refused(f"""
                    The image is deeper than the Docker daemon's storage allows: {base_image} has
                    {base_layers} layers and max_layers is {max_layers}. Lower max_layers in
                    triton-release.yaml (overlay2 refuses images deeper than about 125 layers).""",
                              details=log.splitlines()[-5:]) from None
            if runtime.builder_stage and "Could not resolve host" in log:
                raise InfrastructureError("""
                    The stub builder stage could not reach github.com to fetch python_backend. Build where
                    GitHub is reachable, or give a stub with --stub path:FILE.""", details=log.splitlines()[-5:]) from None
            raise Refused(f"The image build failed: {exc.msg}", details=log.splitlines()[-10:]) from None
        except docker.errors.APIError as exc:
            raise InfrastructureError(f"The Docker daemon failed during the build: {exc.explanation or exc}") from None
    return BuildResult(tag, image.id, base_image, tuple(layers))


def relabel(image: str, labels: dict[str, str], tag: str, client: docker.DockerClient | None = None) -> str:
    """`image` with `labels` added and nothing else changed, tagged `tag`: a build FROM it that
    adds no layer, so the layers stay the ones tested (checked). Returns the new image's id."""
    client = client or docker_client()
    tested = client.images.get(image)
    text = f"FROM {tested.id}\n".encode()
    with tempfile.TemporaryFile() as context:
        with tarfile.open(fileobj=context, mode="w") as tar:
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
        context.seek(0)
        try:
            labelled, _ = client.images.build(fileobj=context, custom_context=True, tag=tag, labels=labels,
                                              rm=True, forcerm=True, pull=False)
        except (docker.errors.BuildError, docker.errors.APIError) as exc:
            raise InfrastructureError(f"The Docker daemon failed to label the tested image {tested.id[:19]}: "
                                      f"{getattr(exc, 'msg', None) or exc}") from None
    if labelled.attrs["RootFS"]["Layers"] != tested.attrs["RootFS"]["Layers"]:
        raise InfrastructureError(f"Labelling {tested.id[:19]} changed its layers; nothing is pushed. Run again.")
    return labelled.id
