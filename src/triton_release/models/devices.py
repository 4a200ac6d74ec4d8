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

import io
import tarfile
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from google.protobuf import json_format, text_format

from triton_release.errors import InfrastructureError
from triton_release.models.config.schema import model_config_pb2
from triton_release.processes import owner_labels, remove_by_name

if TYPE_CHECKING:
    import docker

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
    import docker

    names = sorted(set(names))
    if not names:
        return {}
    reader = f"triton-release-configs-{uuid.uuid4().hex[:12]}"  # known before it exists: removed by it
    found: dict[str, model_config_pb2.ModelConfig | None] = {}
    container = None
    try:
        container = client.containers.create(
            image, command=["true"], entrypoint=[], network_disabled=True, labels=owner_labels(), name=reader
        )
        for name in names:
            try:
                stream, _ = container.get_archive(f"/models/{name}/config.pbtxt")
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    member = tar.extractfile("config.pbtxt")
                    text = member.read().decode("utf-8", errors="replace") if member else ""
                found[name] = text_format.Parse(text, model_config_pb2.ModelConfig()) if member else None
            except docker.errors.NotFound:
                found[name] = None
            except (text_format.ParseError, tarfile.TarError):
                found[name] = None
    except docker.errors.APIError as exc:
        raise InfrastructureError(
            f"The Docker daemon could not read the model configs inside {image}: "
            f"{exc.explanation or exc}. Run again when the daemon is back."
        ) from None
    finally:  # by its name: a signal during the create leaves none behind either
        remove_by_name(client, reader, created=container is not None)
    return found


def image_cpu_overrides(
    client: docker.DockerClient,
    image: str,
    repo: Repository,
    names: Iterable[str],
    environments: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The models among `names` that ask for a GPU in `image` -> the config they load with on a
    machine without GPUs (the load's `config` parameter), made from the image's own config.pbtxt.
    Only the models whose checkout config asks for one are read from the image (a container,
    once per call): a model the image alone puts on a GPU loads from its files and Triton refuses
    it, so a config the image does not hold is never served. `environments`: model -> its
    environment's path in the image, which the override names as the image's copy does."""
    environments = environments or {}
    asking = [name for name in names if name in repo and needs_gpu(repo[name].config)]
    configs = image_configs(client, image, asking)
    return {
        name: cpu_override(config, environments.get(name))
        for name, config in sorted(configs.items())
        if needs_gpu(config)
    }
