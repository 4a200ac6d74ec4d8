"""Triton's backend and platform names, and the file each loads from a version folder: a name
Triton does not know fails only at load, after a build and a server start, so validate names it
first, with the known name meant ("did you mean python?"). A custom backend the base image holds
(/opt/tritonserver/backends/<name>) is named in the `custom_backends` setting."""

from __future__ import annotations

import difflib

# the backends NVIDIA builds (server/README, the backend repositories), and its QA's own examples
BACKENDS = (
    "python",
    "onnxruntime",
    "pytorch",
    "tensorflow",
    "tensorrt",
    "openvino",
    "fil",
    "dali",
    "identity",
    "vllm",
    "tensorrtllm",
    "repeat",
    "square",
    "armnn_tflite",
    "tflite",
    "hugectr",
    "paddle",
    "fastertransformer",
)
# platform -> the backend that serves it (Triton maps each platform onto a backend)
PLATFORMS = {
    "ensemble": None,
    "tensorrt_plan": "tensorrt",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
}
# the file a backend loads from a version folder unless default_model_filename says otherwise
MODEL_FILES = {
    "python": "model.py",
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "openvino": "model.xml",
    "dali": "model.dali",
    "vllm": "model.json",
    "tensorflow_savedmodel": "model.savedmodel",
    "tensorflow_graphdef": "model.graphdef",
    "tensorrt_plan": "model.plan",
    "onnxruntime_onnx": "model.onnx",
    "pytorch_libtorch": "model.pt",
}


def closest(name: str, known: tuple[str, ...] | list[str]) -> str | None:
    """The known name `name` is a near miss of ("pyhton": python), or None."""
    found = difflib.get_close_matches(name.lower(), list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def backend_problem(name: str, custom: tuple[str, ...] = ()) -> str | None:
    """Why `backend: "<name>"` would not load, or None: a name neither Triton's nor a custom one."""
    if name in BACKENDS or name in custom:
        return None
    near = closest(name, [*BACKENDS, *custom])
    hint = f"did you mean {near}? " if near else ""
    return (
        f'backend "{name}" is not one of Triton\'s backends ({", ".join(BACKENDS)}): {hint}tritonserver '
        f"would fail to load the model. If it is a custom backend the base image holds "
        f"(/opt/tritonserver/backends/{name}/), name it in custom_backends in triton-release.yaml"
    )


def platform_problem(name: str) -> str | None:
    """Why `platform: "<name>"` would not load, or None."""
    if name in PLATFORMS:
        return None
    near = closest(name, list(PLATFORMS))
    hint = f"did you mean {near}? " if near else ""
    return (
        f'platform "{name}" is not one of Triton\'s platforms ({", ".join(PLATFORMS)}): {hint}tritonserver '
        'would fail to load the model. Fix the name, or name a backend instead (backend: "python")'
    )


def model_file(backend: str, platform: str, default_model_filename: str) -> str | None:
    """The file Triton loads from a version folder of a model served by `backend` (or `platform`),
    None where this tool does not know it."""
    return default_model_filename or MODEL_FILES.get(backend or platform)
