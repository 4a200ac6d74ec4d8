"""Models whose config asks for GPUs, tested on a machine without any.

`instance_group [ { kind: KIND_GPU count: 2 } ]` makes Triton refuse the model where it sees no
GPU ("has kind KIND_GPU but no GPUs are available"). Such a model is loaded through the
repository API with its config given as the load's `config` parameter: the same config with
each KIND_GPU group made a KIND_CPU group of the same count and no `gpus` list. The image and
the model repository are never changed. KIND_AUTO needs nothing (Triton falls back to the CPU),
and a model without config.pbtxt has no instance group to change.

The override replaces the image's config.pbtxt, so it carries what the image's copy adds to the
user's: the EXECUTION_ENV_PATH parameter of a model with its own environment.
"""

from __future__ import annotations

from google.protobuf import json_format

from triton_release.models.config_schema import model_config_pb2

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
    return json_format.MessageToJson(cpu_config(config, env_path), preserving_proto_field_name=True, indent=None,
                                     sort_keys=True)
