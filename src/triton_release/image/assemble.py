"""The image put together without a builder: its config written here, its layers our own tars,
loaded into the daemon as one `docker load` archive that carries only the layers the daemon
lacks.

A layer's diff id is the sha256 of its tar, which we wrote, so the whole image (config, diff
ids, image id) is known before the daemon sees a byte. The daemon keeps every layer it has by its
chain (the diff ids up to it) and skips the tar of a layer it already holds, so a change re-sends
only the layers after the longest prefix it already has: a one-model change sends one small tar,
not the torch layer before it. When the daemon lost a layer we thought it had (an image pruned
meanwhile), the load fails naming a missing tar, and the archive is sent again with every layer.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import docker

from triton_release.cache import cache_dir
from triton_release.errors import InfrastructureError
from triton_release.files import write_atomic

CHUNK = 1 << 20  # bytes of the archive sent at a time
STOP_WAIT = 30.0  # seconds the archive's writer has to end once the daemon stopped reading

# The keys of an image config's "config" that an image carries (the rest of `docker inspect`'s
# Config belongs to containers).
IMAGE_CONFIG_KEYS = (
    "User",
    "ExposedPorts",
    "Env",
    "Entrypoint",
    "Cmd",
    "Volumes",
    "WorkingDir",
    "Labels",
    "StopSignal",
    "Shell",
    "Healthcheck",
    "OnBuild",
    "ArgsEscaped",
)


def image_config(
    base: Mapping, diff_ids: Sequence[str], labels: Mapping[str, str], cmd: Sequence[str] | None, created: str = ""
) -> bytes:
    """The image config JSON: `base`'s (a `docker inspect` of the base image) with `labels` added,
    `cmd` as the command (None: the base's), and `diff_ids` as the root file system. Canonical:
    the same inputs give the same bytes, so the same image id."""
    config = {key: base["Config"][key] for key in IMAGE_CONFIG_KEYS if (base.get("Config") or {}).get(key)}
    config["Labels"] = {**(config.get("Labels") or {}), **labels}
    if cmd is not None:
        config["Cmd"] = list(cmd)
    found = {
        "architecture": base.get("Architecture") or "amd64",
        "os": base.get("Os") or "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
    }
    if base.get("Variant"):
        found["variant"] = base["Variant"]
    if created:
        found["created"] = created
    return json.dumps(found, sort_keys=True, separators=(",", ":")).encode()


def present_prefix(diff_ids: Sequence[str], held: Sequence[Sequence[str]]) -> int:
    """How many of `diff_ids`, from the first, the daemon holds as a chain: the longest common
    prefix with any of the `held` images' layer lists."""
    best = 0
    for layers in held:
        count = 0
        for ours, theirs in zip(diff_ids, layers):
            if ours != theirs:
                break
            count += 1
        best = max(best, count)
    return best


def _add(tar: tarfile.TarFile, name: str, data: bytes | None = None, path: Path | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    if path is not None:
        info.size = path.stat().st_size
        with open(path, "rb") as handle:
            tar.addfile(info, handle)
    else:
        info.size = len(data or b"")
        tar.addfile(info, io.BytesIO(data or b""))


def write_archive(out: IO[bytes], tag: str, config: bytes, diff_ids: Sequence[str], tars: Mapping[str, Path]) -> None:
    """A `docker load` archive of the image tagged `tag`: its config, its manifest naming every
    layer, and the tars of the layers in `tars` (diff id -> file) only."""
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    names = [diff_id.split(":", 1)[1] + "/layer.tar" for diff_id in diff_ids]
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": names}]
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:  # a stream: never seeks
        _add(tar, config_name, config)
        for diff_id, name in zip(diff_ids, names):
            if diff_id in tars:
                _add(tar, name, path=tars[diff_id])
        _add(tar, "manifest.json", json.dumps(manifest).encode())


def _config_file(image_id: str) -> Path:
    return cache_dir() / "configs" / (image_id.split(":", 1)[-1] + ".json")


def remember_config(config: bytes) -> None:
    """Keep the config bytes of an image put together here, by its id (`config_of`)."""
    target = _config_file(hashlib.sha256(config).hexdigest())
    if not target.is_file():
        write_atomic(target, config)


def config_of(image_id: str) -> bytes | None:
    """The exact config bytes of the image `image_id` ("sha256:<hex>") put together on this machine:
    None when they were not kept (or no longer match the id: a cache may come from anywhere)."""
    try:
        config = _config_file(image_id).read_bytes()
    except OSError:
        return None
    return config if "sha256:" + hashlib.sha256(config).hexdigest() == image_id else None


@contextmanager
def streamed(write: Callable[[IO[bytes]], None]) -> Iterator[Iterator[bytes]]:
    """The bytes `write` writes, as chunks read from a pipe it writes into from a thread. What
    it raised is raised once they are read, and in place of what the sending then failed with
    (the HTTP client takes a body that fails for a dropped connection); a signal stays itself.
    Leaving early closes the pipe, which ends the writer."""
    reading, writing = os.pipe()
    failed: list[BaseException] = []

    def produce() -> None:
        try:
            with open(writing, "wb") as out:
                write(out)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
            failed.append(exc)

    def own_failure() -> BaseException | None:
        return next((exc for exc in failed if not isinstance(exc, BrokenPipeError)), None)

    try:
        source = open(reading, "rb")  # noqa: SIM115 - closed below, which also ends the writer
    except BaseException:
        os.close(reading)
        os.close(writing)
        raise
    thread = threading.Thread(target=produce, name="docker-load-archive", daemon=True)
    try:
        thread.start()
    except BaseException:
        source.close()
        os.close(writing)
        raise

    def chunks() -> Iterator[bytes]:
        while chunk := source.read(CHUNK):
            yield chunk
        thread.join()
        if failed:
            raise failed[0]

    try:
        yield chunks()
    except Exception:
        source.close()
        thread.join(timeout=STOP_WAIT)
        own = own_failure()
        if own is not None:
            raise own from None
        raise
    finally:
        source.close()
        thread.join(timeout=STOP_WAIT)


class MissingLayer(Exception):
    """The daemon lacked a layer the archive left out."""


def load(
    client: docker.DockerClient, tag: str, config: bytes, diff_ids: Sequence[str], tars: Mapping[str, Path]
) -> str:
    """Load the image into the daemon; returns its id (the config's sha256, checked). The archive
    is streamed to the daemon as it is written (its layers' tars are not copied into a file
    first: hundreds of MiB of weights written once more)."""
    with streamed(lambda out: write_archive(out, tag, config, diff_ids, tars)) as archive:
        try:
            for chunk in client.api.load_image(archive):
                error = chunk.get("error") or (chunk.get("errorDetail") or {}).get("message")
                if error:
                    if "layer.tar" in error and "no such file" in error:
                        raise MissingLayer(error)
                    raise InfrastructureError(f"The Docker daemon refused the image {tag}: {error}")
        except docker.errors.APIError as exc:
            raise InfrastructureError(
                f"The Docker daemon failed to load the image {tag}: {exc.explanation or exc}"
            ) from None
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    loaded = client.images.get(tag)
    if loaded.id != image_id or loaded.attrs["RootFS"]["Layers"] != list(diff_ids):
        raise InfrastructureError(
            f"The Docker daemon loaded {tag} as {loaded.id[:19]}, not the image written "
            f"({image_id[:19]}); nothing is pushed. Run again."
        )
    remember_config(config)
    return image_id


def _send(
    client: docker.DockerClient,
    tag: str,
    config: bytes,
    diff_ids: Sequence[str],
    tars: Mapping[str, Path],
    sending: Callable[[], None] | None,
) -> tuple[str, int]:
    if sending is not None:
        sending()
    return load(client, tag, config, diff_ids, tars), len(tars)


def assemble(
    client: docker.DockerClient,
    tag: str,
    config: bytes,
    diff_ids: Sequence[str],
    start: int,
    tar_of: Callable[[str], Path],
    held: Sequence[Sequence[str]] = (),
    sending: Callable[[], None] | None = None,
) -> tuple[str, int]:
    """Load the image whose layers from `start` on are ours (`tar_of(diff_id)` gives a layer's tar,
    written on demand), sending only those the daemon lacks. Returns the image id and how many
    layer tars were sent. `sending` is called each time the tars to send are written, before the
    daemon reads a byte of them."""
    have = max(start, present_prefix(diff_ids, held))
    try:
        return _send(client, tag, config, diff_ids, {d: tar_of(d) for d in diff_ids[have:]}, sending)
    except MissingLayer:
        pass
    try:
        return _send(client, tag, config, diff_ids, {d: tar_of(d) for d in diff_ids[start:]}, sending)
    except MissingLayer as exc:
        raise InfrastructureError(
            f"The Docker daemon lacks a layer of the base image: {exc}. Pull the base image again."
        ) from None
