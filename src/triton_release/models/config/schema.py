"""Triton's model config schema: tritonclient's generated `model_config_pb2`, without gRPC.

`from tritonclient.grpc import model_config_pb2` first runs `tritonclient.grpc`'s __init__,
which imports grpc and the whole client. The generated module itself needs only protobuf, so
it is loaded from its file and registered under its usual name: a later `import
tritonclient.grpc` finds it there and does not register the schema twice.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_NAME = "tritonclient.grpc.model_config_pb2"


def _load() -> ModuleType:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    package = importlib.util.find_spec("tritonclient")
    if package is None or not package.submodule_search_locations:
        raise ImportError("tritonclient is not installed: reinstall triton-release")
    path = Path(list(package.submodule_search_locations)[0]) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(_NAME, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_NAME]
        raise
    return module


if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2
else:
    model_config_pb2 = _load()
