"""Which servers may skip auto-complete: a model file that may complete its config keeps it on, read
as a syntax tree (models/config/completion.py). The served configs staying the same where it is
off is shown on the real server (tests/integration/test_auto_complete_served.py)."""

from __future__ import annotations

import textwrap

import pytest

from support.models import PYTHON_MODEL
from triton_release.models.config.completion import completes_its_config, why_auto_complete
from triton_release.models.config.schema import model_config_pb2


def source(text: str) -> bytes:
    return textwrap.dedent(text).encode()


@pytest.mark.parametrize(
    "text",
    [
        "class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(c):\n        return c\n",
        "from base import Model\n\nclass TritonPythonModel(Model):\n    pass\n",
        "from models import TritonPythonModel\n",
        "import lib\n\nTritonPythonModel = lib.make()\n",
        "class TritonPythonModel(metaclass=Meta):\n    pass\n",
        "@decorate\nclass TritonPythonModel:\n    pass\n",
        "class TritonPythonModel:\n    pass\n\nsetattr(TritonPythonModel, 'x', 1)\n",
        "if True:\n    class TritonPythonModel(Base):\n        pass\n",
        "class TritonPythonModel:\n    def initialize(self, args):\n        getattr(self, 'auto_complete_config')\n",
        "class TritonPythonModel:\n    def execute(self, requests:\n",  # does not parse: nobody can say
    ],
    ids=[
        "its method",
        "a base class",
        "imported",
        "made elsewhere",
        "a metaclass",
        "a decorator",
        "patched",
        "a base class inside an if",
        "the name in a string",
        "not Python",
    ],
)
def test_a_model_file_that_may_complete_its_config_says_so(text):
    assert completes_its_config(source(text))


@pytest.mark.parametrize(
    "text",
    [PYTHON_MODEL, "class TritonPythonModel(object):\n    def execute(self, requests):\n        return []\n", ""],
    ids=["the add-one model", "an object subclass", "no class at all (it fails to load either way)"],
)
def test_a_plain_model_file_does_not(text):
    assert not completes_its_config(source(text))


def config(text: str) -> model_config_pb2.ModelConfig:
    from google.protobuf import text_format

    return text_format.Parse(text, model_config_pb2.ModelConfig())


def files(found: dict[str, bytes]):
    read: list[str] = []

    def reader(path: str) -> bytes | None:
        read.append(path)
        return found.get(path)

    return reader, read


def test_a_server_of_plain_python_models_and_an_ensemble_needs_none_and_reads_each_version_of_them():
    reader, read = files({"/models/a/1/model.py": PYTHON_MODEL.encode(), "/models/a/2/model.py": b""})
    configs = {"a": config('backend: "python"'), "e": config('platform: "ensemble"')}
    assert why_auto_complete(configs, {"a": [1, 2], "e": [1]}, reader) is None
    assert read == ["/models/a/1/model.py", "/models/a/2/model.py"]


def test_default_model_filename_is_the_file_read():
    reader, read = files({"/models/a/1/main.py": b"class TritonPythonModel(Base): pass\n"})
    configs = {"a": config('backend: "python" default_model_filename: "main.py"')}
    assert (
        why_auto_complete(configs, {"a": [1]}, reader) == "a/1/main.py may complete its config (auto_complete_config)"
    )
    assert read == ["/models/a/1/main.py"]


@pytest.mark.parametrize(
    ("configs", "versions", "why"),
    [
        ({"a": None}, {"a": [1]}, "a has no config.pbtxt that parses: Triton completes it"),
        ({"a": config('backend: "onnxruntime"')}, {"a": [1]}, "a is served by the onnxruntime backend, which may"),
        ({"a": config('platform: "onnxruntime_onnx"')}, {"a": [1]}, "a is served by the onnxruntime_onnx backend"),
        ({"a": config('backend: "python"')}, {"a": []}, "the image does not say which version folders of a it holds"),
    ],
    ids=["no config", "another backend", "a platform", "versions unknown"],
)
def test_anything_else_keeps_auto_complete_on_and_says_why(configs, versions, why):
    reader, _ = files({"/models/a/1/model.py": PYTHON_MODEL.encode()})
    assert why_auto_complete(configs, versions, reader).startswith(why)
