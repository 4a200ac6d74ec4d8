"""Models whose config asks for GPUs, tested on a machine without any.

`instance_group [ { kind: KIND_GPU count: 2 } ]` makes Triton refuse the model where it sees no
GPU ("has kind KIND_GPU but no GPUs are available"). Such a model is loaded through the
repository API with its config given as the load's `config` parameter: the same config with
each KIND_GPU group made a KIND_CPU group of the same count and no `gpus` list. The image and
the model repository are never changed. KIND_AUTO needs nothing (Triton falls back to the CPU),
and a model without config.pbtxt has no instance group to change.

The override replaces the image's config.pbtxt, so it is made from that very file, read from the
image under test (`image_cpu_overrides`): never from the checkout, whose config may not be the one
the image was built with. It also carries the EXECUTION_ENV_PATH parameter of a model with its own
environment, which the image's copy names.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from google.protobuf import json_format, text_format

from triton_release.errors import InfrastructureError
from triton_release.models.config.schema import model_config_pb2
from triton_release.processes import owner_labels, remove_by_name

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from triton_release.models.repository import Repository

ENV_PARAMETER = "EXECUTION_ENV_PATH"  # the Python backend's parameter naming the model's environment
_GROUP = model_config_pb2.ModelInstanceGroup


def needs_gpu(config: model_config_pb2.ModelConfig | None) -> bool:
    """Whether Triton would refuse `config` on a machine without GPUs: a KIND_GPU instance group."""
    return config is not None and any(group.kind == _GROUP.KIND_GPU for group in config.instance_group)


def cpu_config(config: model_config_pb2.ModelConfig, env_path: str | None = None) -> model_config_pb2.ModelConfig:
    """A copy of `config` with each KIND_GPU group a KIND_CPU group of the same count (its `gpus`
    cleared, every other field kept); with `env_path`, the model's environment parameter set."""
    copy = model_config_pb2.ModelConfig()
    copy.CopyFrom(config)
    for group in copy.instance_group:
        if group.kind == _GROUP.KIND_GPU:
            group.kind = _GROUP.KIND_CPU
            del group.gpus[:]
    if env_path is not None:
        copy.parameters[ENV_PARAMETER].string_value = env_path
    return copy


def cpu_override(config: model_config_pb2.ModelConfig, env_path: str | None = None) -> str:
    """The load request's `config` parameter: `cpu_config` in protobuf's JSON mapping."""
    return json_format.MessageToJson(
        cpu_config(config, env_path), preserving_proto_field_name=True, indent=None, sort_keys=True
    )


def image_configs(
    client: docker.DockerClient, image: str, names: Iterable[str]
) -> dict[str, model_config_pb2.ModelConfig | None]:
    """Each model's config as `image` holds it (/models/<model>/config.pbtxt), read from one container
    created from the image and never started; None for a model whose config the image lacks or
    that does not parse (Triton then loads it from its own files, and says what is wrong)."""
    names = sorted(set(names))
    with image_reader(client, image) as read:
        return {name: parse_config(read(f"/models/{name}/config.pbtxt")) for name in names}


def parse_config(data: bytes | None) -> model_config_pb2.ModelConfig | None:
    """config.pbtxt's bytes as a config; None for none, or for a file that does not parse."""
    if data is None:
        return None
    try:
        return text_format.Parse(data.decode("utf-8", errors="replace"), model_config_pb2.ModelConfig())
    except text_format.ParseError:
        return None


# What one run of a container of the image gathers for `image_reader(bulk=True)`: the configs and
# Python files of /models under 1 MiB, as one tar inside it (GNU tar; without it, read one by one).
SMALL_FILES = "/tmp/triton-release-small-files.tar"
GATHER = (
    "cd / && find models -maxdepth 3 \\( -name config.pbtxt -o -name '*.py' \\) -type f -size -1024k -print0"
    f" | tar --null -T - -cf {SMALL_FILES}"
)
GATHER_SECONDS = 60


@contextlib.contextmanager
def image_reader(
    client: docker.DockerClient, image: str, *, bulk: bool = False
) -> Iterator[Callable[[str], bytes | None]]:
    """`read(path)`: a file's bytes as `image` holds it, None when it has no such file; from one
    container created from the image on first use, removed at the end. Each read is a request to
    the daemon (about 50 ms); `bulk`: the container runs once first, gathering every config and
    Python file of /models into one tar read at once (about half a second), and only a file
    that is not among them is asked for alone."""
    import docker

    reader = f"triton-release-files-{uuid.uuid4().hex[:12]}"  # known before it exists: removed by it
    container, attempted = None, False
    gathered: dict[str, bytes] = {}

    def read(path: str) -> bytes | None:
        nonlocal container, attempted
        try:
            if not attempted:
                attempted = True
                command = ["sh", "-c", GATHER] if bulk else ["true"]
                container = client.containers.create(
                    image, command=command, entrypoint=[], network_disabled=True, labels=owner_labels(), name=reader
                )
                if bulk:
                    gathered.update(_gathered(container))
            if path in gathered:
                return gathered[path]
            assert container is not None, "its create failed: nothing is read after that"
            try:
                stream, _ = container.get_archive(path)
            except docker.errors.NotFound:
                return None
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.getmember(path.rsplit("/", 1)[-1])
                data = tar.extractfile(member) if member.isfile() else None  # a link: not read through
                return data.read() if data else None
        except (tarfile.TarError, KeyError):
            return None
        except docker.errors.APIError as exc:
            raise InfrastructureError(
                f"The Docker daemon could not read {path} inside {image}: "
                f"{exc.explanation or exc}. Run again when the daemon is back."
            ) from None

    try:
        yield read
    finally:  # by its name: a signal during the create leaves none behind either
        if attempted:
            remove_by_name(client, reader, created=container is not None)


def _gathered(container: Container) -> dict[str, bytes]:
    """The files GATHER put together in `container` (run once here), by their path; {} when it could
    not (no sh, find or GNU tar in the image; a timeout): every file is then read alone."""
    import docker
    import requests

    try:
        container.start()
        if container.wait(timeout=GATHER_SECONDS).get("StatusCode") != 0:
            return {}
        stream, _ = container.get_archive(SMALL_FILES)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as outer:
            inner = outer.extractfile(SMALL_FILES.rsplit("/", 1)[-1])
            if inner is None:
                return {}
            with tarfile.open(fileobj=inner) as tar:
                return {
                    f"/{member.name}": data.read()
                    for member in tar.getmembers()
                    if member.isfile() and (data := tar.extractfile(member)) is not None
                }
    except (docker.errors.APIError, requests.RequestException, tarfile.TarError):
        return {}


def image_cpu_overrides(
    repo: Repository,
    configs: Mapping[str, model_config_pb2.ModelConfig | None],
    environments: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The models of `configs` (each model's config.pbtxt as the image under test holds it) that
    ask for a GPU there -> the config they load with on a machine without GPUs (the load's `config`
    parameter), made from the image's own config. Only a model whose checkout config asks for one
    too: a model the image alone puts on a GPU loads from its files and Triton refuses it, so a
    config the image does not hold is never served. `environments`: model -> its environment's
    path in the image, which the override names as the image's copy does."""
    environments = environments or {}
    return {
        name: cpu_override(config, environments.get(name))
        for name, config in sorted(configs.items())
        if name in repo and needs_gpu(repo[name].config) and needs_gpu(config)
    }
