"""The build: deterministic layer tars and an image config put together into an image without a
builder (image/assemble.py), the previous build's layer order kept so the daemon already holds
every layer up to the one changed, and the layer plan kept within `max_layers`, the base image's
own layers counted. The build the tag named before is removed once replaced, if nothing else holds
it (image/tidy.py)."""

from __future__ import annotations

import errno
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import docker

from triton_release import progress
from triton_release.cache import cache_dir
from triton_release.contract import CREATED_LABEL, LAYER_ORDER_LABEL
from triton_release.errors import InfrastructureError, no_space
from triton_release.image.assemble import assemble, image_config
from triton_release.image.engine import docker_client
from triton_release.image.layers import (
    SERVER_COMMAND,
    Layer,
    LayerTars,
    Runtime,
    StaleDigest,
    order_layers,
    plan_image,
)
from triton_release.image.tidy import Tidied, remove_untagged
from triton_release.models.repository import Repository

if TYPE_CHECKING:
    from docker.models.images import Image

    from triton_release.image.plan import Planned


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    base_image: str
    layers: tuple[Layer, ...]
    sent: int = 0  # layer tars the daemon lacked and was sent
    diff_ids: tuple[str, ...] = ()  # the image's layers, the base's first
    replaced: Tidied = Tidied()  # the build the tag named before, removed once untagged (image/tidy.py)

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "image_id": self.image_id,
            "replaced": self.replaced.to_json(),
            "base_image": self.base_image,
            "layers_sent": self.sent,
            "layers": [layer.to_json() for layer in self.layers],
        }


NOTHING_EXTRA = Runtime()  # the models alone: the base image's stub, no environments


@dataclass(frozen=True)
class LayersOut:
    """Where a build leaves the tars of the layers it writes, and `ready`, told the image's diff ids
    and the tars written (diff id -> file) once those the daemon lacks are written, before the
    daemon reads them: an upload started there goes up beside the daemon's own copy of them."""

    folder: Path
    ready: Callable[[Sequence[str], Mapping[str, Path]], None]


def build_image(
    repo: Repository,
    base_image: str,
    tag: str,
    labels: dict[str, str] | None = None,
    models: list[str] | None = None,
    client: docker.DockerClient | None = None,
    runtime: Runtime = NOTHING_EXTRA,
    *,
    max_layers: int = 120,
    base_layers: int | None = None,
    blob_ids: Mapping[str, str] | None = None,
    layers_out: LayersOut | None = None,
) -> BuildResult:
    """Put `tag` together FROM `base_image` with the repository's models (all, or `models`) and
    the runtime's items, in at most `max_layers` layers: our layer tars and a config written
    here, loaded into the daemon with only the layers it lacks. `base_layers`: the base image's
    own layer count (default: looked up on the daemon). `blob_ids`: the git object id of each file
    that holds exactly its committed content, by absolute path (a checkout built in place).
    `layers_out`: where the layer tars written are left, and whom to tell once they are (default: a
    temporary folder, removed)."""
    client = client or docker_client()
    base = _local_image(client, base_image)
    base_ids = base.attrs["RootFS"]["Layers"]
    if base_layers is None:
        base_layers = len(base_ids)
    planned = plan_image(repo, base_image, models, runtime, max_layers=max_layers, base_layers=base_layers)
    previous = _previous(client, tag)
    labels = labels or {}
    try:
        with tempfile.TemporaryDirectory(prefix="triton-release-layers-") as scratch:
            folder, ready = (layers_out.folder, layers_out.ready) if layers_out else (Path(scratch), None)
            tars = LayerTars(folder, cache_dir() / "layers", blob_ids, ready)
            try:
                built = _assemble(client, tag, base, base_ids, planned, tars, previous, labels)
            except StaleDigest:
                tars.forget()
                built = _assemble(client, tag, base, base_ids, planned, tars, previous, labels)
            # the build the tag named before, untagged now: its layers that matter are the new one's
            replaced = remove_untagged(client, [previous.id], keep=[built.image_id]) if previous else Tidied()
            return replace(built, base_image=base_image, replaced=replaced)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise no_space(tempfile.gettempdir(), "writing the image's layers") from None


def _assemble(
    client: docker.DockerClient,
    tag: str,
    base: Image,
    base_ids: list[str],
    planned: list[Planned],
    tars: LayerTars,
    previous: Image | None,
    labels: Mapping[str, str],
) -> BuildResult:
    order = json.loads((previous.labels.get(LAYER_ORDER_LABEL) if previous else None) or "[]")
    with progress.task("build", total=len(planned), unit="layers") as bar:
        written = []
        for layer in planned:
            written.append(tars.layer(layer))
            bar.advance(detail=layer.name)
        bar.update(detail="loading the new layers into the daemon")
        return _load(client, tag, base, base_ids, order_layers(written, order), tars, previous, labels)


def _load(
    client: docker.DockerClient,
    tag: str,
    base: Image,
    base_ids: list[str],
    layers: list[Layer],
    tars: LayerTars,
    previous: Image | None,
    labels: Mapping[str, str],
) -> BuildResult:
    labels = {**labels, LAYER_ORDER_LABEL: json.dumps([[layer.name, layer.digest] for layer in layers])}
    diff_ids = [*base_ids, *(f"sha256:{layer.digest}" for layer in layers)]
    config = image_config(base.attrs, diff_ids, labels, SERVER_COMMAND, labels.get(CREATED_LABEL, ""))
    held = [previous.attrs["RootFS"]["Layers"]] if previous else []
    image_id, sent = assemble(
        client,
        tag,
        config,
        diff_ids,
        len(base_ids),
        lambda diff_id: tars.tar(diff_id.split(":", 1)[1]),
        held,
        lambda: tars.tell(diff_ids),
    )
    return BuildResult(tag, image_id, base.id, tuple(layers), sent, tuple(diff_ids))


def _local_image(client: docker.DockerClient, image: str) -> Image:
    """`image` from the daemon, pulled when absent."""
    from triton_release.image.base import image_id

    try:
        return client.images.get(image_id(client, image))
    except docker.errors.APIError as exc:
        raise InfrastructureError(
            f"The Docker daemon failed while looking up {image}: {exc.explanation or exc}"
        ) from None


def _previous(client: docker.DockerClient, tag: str) -> Image | None:
    """The image last put together under `tag` on this daemon, if any: its layer order is kept."""
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def relabel(image: str, labels: dict[str, str], tag: str, client: docker.DockerClient | None = None) -> str:
    """`image` with `labels` added and nothing else changed, tagged `tag`: the same layers (no tar
    is sent), a config with the labels. Returns the new image's id."""
    client = client or docker_client()
    tested = client.images.get(image)
    diff_ids = tested.attrs["RootFS"]["Layers"]
    created = tested.labels.get(CREATED_LABEL, "")
    config = image_config(tested.attrs, diff_ids, labels, None, created)
    image_id, _ = assemble(client, tag, config, diff_ids, len(diff_ids), _no_tar, [diff_ids])
    return image_id


def _no_tar(diff_id: str) -> Path:
    raise InfrastructureError(
        f"The Docker daemon lost layer {diff_id[:19]} of the tested image; nothing is pushed. Run again."
    )
