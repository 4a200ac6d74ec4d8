"""The Docker daemon's disk: how much is free where it keeps images, and how much a release needs
there. NVIDIA's images are larger than the free disk of a standard GitHub-hosted runner (14 GB
guaranteed; `nvcr.io/nvidia/tritonserver:24.06-py3` is about 15.5 GB), and a pull that runs out
fails late with "no space left on device"; `doctor` and `release` refuse before that, with the
numbers.

What a release needs on the daemon's disk:
- the base, when it is not on the daemon yet: its compressed layers as the registry lists them,
  downloaded, plus what they unpack to (`UNPACKED` times their size, a cautious figure for
  NVIDIA's images), less nothing: both exist while the pull runs;
- the release's own layers: the model repository as it ships, written once as the layer and once
  more by the daemon as it stores it (`RELEASE_COPIES`);
- `HEADROOM` for the server's container, logs and the build's small files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import docker
import requests

from triton_release.errors import InfrastructureError

GiB = 1 << 30
UNPACKED = 2.0  # unpacked bytes of a compressed layer, at most, in NVIDIA's images (about 1.8 seen)
RELEASE_COPIES = 2
HEADROOM = 1 * GiB


@dataclass(frozen=True)
class Free:
    bytes: int | None  # None: the daemon could not be asked
    how: str  # how it was measured, or why it could not be


@dataclass(frozen=True)
class Need:
    pull: int  # bytes the base's pull needs (0: it is on the daemon)
    release: int  # bytes the release's own layers and container need

    @property
    def total(self) -> int:
        return self.pull + self.release

    def describe(self) -> str:
        pulled = f"{gib(self.pull)} for the base's pull and " if self.pull else ""
        return f"{pulled}{gib(self.release)} for the release"


def gib(size: int) -> str:
    return f"{size / GiB:.1f} GiB"


def need(base_compressed: int | None, model_bytes: int) -> Need:
    """What a release needs on the daemon's disk; `base_compressed` None when the base is there."""
    pull = 0 if base_compressed is None else int(base_compressed * (1 + UNPACKED))
    return Need(pull, model_bytes * RELEASE_COPIES + HEADROOM)


def folder_bytes(root: Path) -> int:
    """The bytes of the files under `root`, links not followed."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += (Path(folder) / name).lstat().st_size
            except OSError:
                continue
    return total


def daemon_free(client: docker.DockerClient, env: Mapping[str, str], local_images: Iterable[str]) -> Free:
    """The free bytes where the daemon keeps its images. A daemon on this machine (its socket here,
    its DockerRootDir visible) is read directly; otherwise `df` runs in a throwaway container of an
    image the daemon already holds, whose root file system lives on that same disk."""
    try:
        root = str(client.info().get("DockerRootDir") or "")
    except (docker.errors.APIError, requests.RequestException) as exc:
        return Free(None, f"the daemon did not answer `docker info` ({exc.__class__.__name__})")
    host = env.get("DOCKER_HOST", "") or "unix://"
    if host.startswith("unix://") and root and Path(root).is_dir():
        stat = os.statvfs(root)
        return Free(stat.f_bavail * stat.f_frsize, f"free on {root}, the daemon's DockerRootDir")
    from triton_release.image.base import run_probe

    for image in local_images:
        try:
            client.images.get(image)
        except (docker.errors.APIError, requests.RequestException):
            continue
        try:
            output = run_probe(client, image, "df -Pk / | tail -n 1", {})
        except Exception as exc:  # a probe that cannot run leaves the figure unknown, said so
            return Free(None, f"`df` in a container of {image} failed ({exc.__class__.__name__})")
        fields = output.split()
        if len(fields) >= 4 and fields[3].isdigit():
            return Free(int(fields[3]) * 1024, f"free on the daemon's disk, by `df` in a container of {image}")
    return Free(None, "the daemon's DockerRootDir is not on this machine and it holds no image to run `df` in")


def refuse_if_short(free: Free, needed: Need, base_image: str) -> None:
    """Refuse (exit 3: the machine, not the models) when the daemon's free disk cannot hold `needed`."""
    if free.bytes is None or free.bytes >= needed.total:
        return
    raise InfrastructureError(short_message(free, needed, base_image))


def short_message(free: Free, needed: Need, base_image: str) -> str:
    missing = needed.total - (free.bytes or 0)
    return f"""
        The Docker daemon has {gib(free.bytes or 0)} free ({free.how}); this release needs about
        {gib(needed.total)} ({needed.describe()}), {gib(missing)} more than there is. Free disk on the
        daemon's machine (on a GitHub-hosted runner, remove the preinstalled tools you do not use, such
        as /usr/share/dotnet, /usr/local/lib/android and /opt/ghc), use a larger runner or a self-hosted
        one that keeps {base_image}, or a smaller base image built with only the backends the models
        use (NVIDIA's compose.py)."""
