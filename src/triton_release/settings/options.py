"""The resolved settings (`Settings`) and the typed groups built from them once and passed whole:
`ImageOptions`, `ServerOptions` and `PublishOptions`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ImageOptions:
    """What the release image is built from and how: one group of settings, built once
    (Settings.image) and passed whole to the steps that build (steps.environments, steps.build)."""

    base_image: str  # the Triton image it is built FROM
    python: str | None = None  # X.Y the models run on; None: the base image's python3
    stub: str = "auto"  # where the Python backend stub comes from (image/stub.py)
    requirements_options: str = "refuse"  # pip options in requirements.txt: refuse|allow
    max_layers: int = 120  # the layer budget, the base image's layers counted
    warmup: str = "off"  # golden: model_warmup from the golden inputs, in the image's configs
    custom_backends: tuple[str, ...] = ()  # backends besides Triton's that the base image holds
    stub_sources: str | None = None  # a folder or URL of git mirrors for a source stub; None: GitHub

    def to_json(self) -> dict:
        return {
            "base_image": self.base_image,
            "python": self.python,
            "stub": self.stub,
            "requirements_options": self.requirements_options,
            "max_layers": self.max_layers,
            "warmup": self.warmup,
            "stub_sources": self.stub_sources,
        }


@dataclass(frozen=True)
class ServerOptions:
    """How tritonserver runs the golden cases: one group of settings, built once (Settings.server)
    and passed whole to the code that starts the server (steps.test, record, verify_release)."""

    load_timeout: float = 300  # seconds for the models to load
    memory: int | None = None  # the container's memory limit in bytes; None: 3/4 of this machine's
    pids: int = 4096  # the container's process limit
    max_loaded: int = 50  # the wave size: more models are tested in waves of at most this many
    gpus: str | None = None  # the GPUs it gets; None: KIND_GPU models are tested on the CPU
    gpu_models: str = "test"  # test|require: a KIND_GPU model that cannot load on the CPU

    def to_json(self) -> dict:
        return {
            "load_timeout": self.load_timeout,
            "max_loaded": self.max_loaded,
            "gpus": self.gpus,
            "gpu_models": self.gpu_models,
        }


@dataclass(frozen=True)
class PublishOptions:
    """How a release is published: one group of settings, built once (Settings.publish) and passed
    whole to the code that moves the channel, retains releases and pushes the release commit
    (release, stage, promote, push, rollback, and their steps)."""

    channel: str = "latest"  # the moving tag consumers follow
    keep: int | None = None  # keep only the newest N releases; None: every release
    push_commit: bool = False  # with --commit: push the release commit and its tag to origin
    upload_during_tests: bool = True  # the new layers go up while the golden cases run
    tags: str = "all"  # all: X.Y, X, sha- and the channel move; version: X.Y.Z and sha- only (write-once)


@dataclass(frozen=True)
class Settings:
    values: Mapping[str, Any]
    sources: Mapping[str, str]  # key -> where its value came from
    warnings: tuple[str, ...] = ()

    @property
    def image(self) -> ImageOptions:
        return ImageOptions(
            self.base_image,
            self.python,
            self.stub,
            self.requirements_options,
            self.max_layers,
            self.warmup,
            self.custom_backends,
            self.stub_sources,
        )

    @property
    def server(self) -> ServerOptions:
        return ServerOptions(
            self.load_timeout, self.server_memory, self.server_pids, self.max_loaded, self.gpus, self.gpu_models
        )

    @property
    def publish(self) -> PublishOptions:
        return PublishOptions(self.channel, self.keep, self.push_commit, self.upload_during_tests, self.tags)

    def __getattr__(self, key: str) -> Any:
        try:
            return self.values[key]
        except KeyError:
            raise AttributeError(key) from None

    def to_json(self) -> dict:
        return dict(self.values)
