"""The base's pull, beside the steps that do not need the base.

A release on a daemon that does not hold its base (a fresh CI runner: NVIDIA's image is about
15 GB) starts the pull as it starts, in a thread, and goes on with what needs no base: validate,
changed, the bump and the commit's export. The first step that needs the base (the environments,
which inspect it) waits for the pull, as the step `pull`, which shows how far it got while it waits.

Nothing is left half-done: the daemon registers the image only once every layer is in, and a
pull stopped (a signal, a failure of another step, a release with nothing to build) closes its
stream, which the daemon takes as the pull's end. A failed pull names the image and the
registry's answer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from triton_release.errors import InfrastructureError, Refused
from triton_release.progress import size

if TYPE_CHECKING:
    import docker

    from triton_release.image.base import BaseImage

SHOWN_EVERY = 5.0  # seconds between the lines that say how far the pull got, while it is waited for
STOP_WAIT = 10.0  # seconds a stopped pull's thread has to let its stream go


@dataclass(frozen=True)
class Pulled:
    """The base's pull: the image pulled, its id on the daemon, the bytes downloaded and the seconds
    from its start to its end; `waited` the seconds the release waited for it (0: it was done)."""

    image: str
    image_id: str
    downloaded: int
    seconds: float
    waited: float

    @property
    def rate(self) -> float:
        """Bytes per second downloaded, over the whole pull (download and unpacking)."""
        return self.downloaded / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {
            "image": self.image,
            "image_id": self.image_id,
            "downloaded_bytes": self.downloaded,
            "pull_seconds": round(self.seconds, 3),  # from its start; the step's seconds: the wait
        }

    def summary(self) -> str:
        waited = f"; waited {self.waited:.1f} s for it" if self.waited >= 0.05 else "; done before it was needed"
        return (
            f"pulled {self.image} ({size(self.downloaded)} in {self.seconds:.1f} s, {self.rate / 1e6:.1f} MB/s){waited}"
        )


@dataclass
class PullProgress:
    """What the pull's stream said so far, per layer: bytes downloaded of its size."""

    current: dict[str, int] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)

    def add(self, event: dict) -> None:
        layer, status = str(event.get("id") or ""), str(event.get("status") or "")
        detail = event.get("progressDetail") or {}
        if not layer:
            return
        if status == "Downloading" and isinstance(detail.get("current"), int):
            self.current[layer] = detail["current"]
            if isinstance(detail.get("total"), int) and detail["total"] > 0:
                self.total[layer] = detail["total"]
        elif status in ("Download complete", "Pull complete", "Already exists"):
            self.done.add(layer)
            if layer in self.total:
                self.current[layer] = self.total[layer]

    @property
    def downloaded(self) -> int:
        return sum(self.current.values())

    def line(self, image: str, seconds: float) -> str:
        known = sum(self.total.values())
        of = f" of {size(known)} listed so far" if known else ""
        return f"pulling {image}: {size(self.downloaded)}{of} in {seconds:.0f} s"


def pull_failure(image: str, answer: str) -> InfrastructureError | Refused:
    """The error of a pull that failed: the image and the registry's answer; a missing image, a
    refused login or a registry host that does not exist (a name mistyped, or a Docker Hub name
    meant for another registry) is the user's to fix (Refused), the rest the network's or the
    registry's."""
    lowered = answer.lower()
    if any(word in lowered for word in ("not found", "manifest unknown", "unauthorized", "denied", "no such host")):
        return Refused(f"""
            The base image {image} is neither on this Docker host nor pullable: its registry answered
            "{answer}". Check the name and the tag, log in to its registry first (`docker login
            nvcr.io` for NVIDIA's images), or give another with --base-image.""")
    return InfrastructureError(f"""
        The pull of the base image {image} failed: "{answer}". Nothing of it was kept (the daemon
        keeps an image only once every layer is in); rerun the release once the registry and the
        network answer.""")


class BackgroundPull:
    """The pull of `image` through the daemon `client`, in a daemon thread from `start()`; `wait()`
    gives its Pulled or raises its failure; `stop()` ends it, whatever its state (idempotent)."""

    def __init__(self, client: docker.DockerClient, image: str, expected_id: str = "") -> None:
        self.client = client
        self.image = image
        self.expected_id = expected_id  # the image id its registry named before the pull ("": unknown)
        self.progress = PullProgress()
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._image_id = ""
        self._started = 0.0
        self._ended = 0.0
        self._thread = threading.Thread(target=self._run, name="triton-release-pull", daemon=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> BackgroundPull:
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def _run(self) -> None:
        import docker as docker_sdk
        import requests
        from docker.utils import parse_repository_tag

        repository, tag = parse_repository_tag(self.image)
        stream = None
        try:
            stream = self.client.api.pull(repository, tag=tag or "latest", stream=True, decode=True)
            for event in stream:
                if self._stopping.is_set():
                    return
                if event.get("error"):
                    detail = event.get("errorDetail") or {}
                    self._error = pull_failure(self.image, str(detail.get("message") or event["error"]))
                    return
                self.progress.add(event)
            self._image_id = self.client.images.get(self.image).id
        except docker_sdk.errors.APIError as exc:
            self._error = pull_failure(self.image, str(exc.explanation or exc))
        except (docker_sdk.errors.DockerException, requests.RequestException, OSError) as exc:
            if not self._stopping.is_set():
                self._error = pull_failure(self.image, f"{exc.__class__.__name__}: {exc}")
        except BaseException as exc:  # said by wait(), never lost in the thread
            self._error = exc
        finally:
            self._ended = time.perf_counter()
            if stream is not None and hasattr(stream, "close"):
                with contextlib.suppress(Exception):  # the stream of a pull that ended is gone already
                    stream.close()

    def ahead(self) -> BaseImage | None:
        """The base's inspection this machine's cache holds for the image id its registry named
        before the pull (image/base.py's cache), so that the environments need not wait; None when
        the id is unknown or the cache does not hold it."""
        from triton_release.image.base import cached

        found = cached(self.image, self.expected_id) if self.expected_id else None
        return found if found is not None and found.layers else None

    def wait(self, show: Callable[[str], None] | None = None, *, inspected: BaseImage | None = None) -> Pulled:
        """Wait for the pull (saying how far it got every SHOWN_EVERY seconds to `show`), then its
        Pulled; its failure raised as the error the release reports. With `inspected` (the base as
        the release prepared it, ahead of the pull), the image pulled must be that one."""
        from triton_release.signals import checkpoint

        waiting = time.perf_counter()
        while self._thread.is_alive():
            self._thread.join(SHOWN_EVERY)
            checkpoint()  # a signal while waiting stops the release (and, in its finally, the pull)
            if self._thread.is_alive() and show is not None:
                show(self.progress.line(self.image, time.perf_counter() - self._started))
        waited = time.perf_counter() - waiting
        if self._error is not None:
            raise self._error
        if self._stopping.is_set() or not self._image_id:
            raise InfrastructureError(f"The pull of the base image {self.image} was stopped before it ended.")
        if inspected is not None and self._image_id != inspected.image_id:  # another id scheme, or a moved tag
            from triton_release.image.base import inspect

            pulled_as_inspected(self.image, inspected, inspect(self.client, self.image))
        return Pulled(self.image, self._image_id, self.progress.downloaded, self._ended - self._started, waited)

    def stop(self) -> None:
        """End the pull: its thread lets its stream go (the daemon ends the pull) within STOP_WAIT."""
        self._stopping.set()
        if self._thread.is_alive():
            with contextlib.suppress(Exception):  # the client of a pull that ended may be closed already
                self.client.api.close()  # a thread blocked on the stream's next line is freed
            self._thread.join(STOP_WAIT)


def pulled_as_inspected(image: str, inspected: BaseImage, pulled: BaseImage) -> None:
    """Refuse a pulled base that is not the one the release was prepared on (its environments
    resolved against `inspected`, the cache's inspection of the id the registry named before the
    pull): the tag moved between the two. The same Triton, Pythons, stub, glibc, backends and
    layer count is the same base, whatever id the daemon gives it."""
    if replace(pulled, image=image, image_id="") == replace(inspected, image=image, image_id=""):
        return
    raise InfrastructureError(f"""
        The base image {image} changed while it was pulled: the release was prepared on
        {inspected.image_id} (the image its registry named as the release started), and the daemon
        pulled {pulled.image_id}, which differs from it (Triton {pulled.triton_version}, Python
        {pulled.python3}, against {inspected.triton_version}, {inspected.python3}). The tag was moved
        between the two. Nothing was built or pushed; rerun the release, which prepares on the
        image now pulled.""")


def start_if_missing(
    image: str, client: docker.DockerClient | None = None, expected_id: Callable[[str], str] = lambda _: ""
) -> BackgroundPull | None:
    """A BackgroundPull of `image`, started, when the daemon does not hold it; None when it does,
    or when the daemon cannot say (the environments step then finds the problem and says it).
    `expected_id(image)`: the id its registry names for it now ("" when unknown)."""
    import docker as docker_sdk
    import requests

    from triton_release.image.engine import docker_client

    try:
        client = client or docker_client()
        client.images.get(image)
        return None
    except docker_sdk.errors.ImageNotFound:
        pass
    except (docker_sdk.errors.DockerException, requests.RequestException, InfrastructureError):
        return None
    return BackgroundPull(docker_client(), image, expected_id(image)).start()  # its own client: the stream holds it
