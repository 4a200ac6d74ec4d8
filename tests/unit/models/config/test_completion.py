"""Which servers may skip auto-complete: a model file that may complete its config keeps it on, read
as a syntax tree (models/config/completion.py). The served configs staying the same where it is
off is shown on the real server (tests/integration/test_auto_complete_served.py)."""

from __future__ import annotations

import textwrap

import pytest

from support.models import PYTHON_MODEL
from triton_release.models.config.completion import completes_its_config, loads_models, why_auto_complete
from triton_release.models.config.schema import model_config_pb2


def source(text: str) -> bytes:
    return textwrap.dedent(text).encode()


MAY_COMPLETE = {
    "its method": "class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(c):\n        return c\n",
    "a base class": "from base import Model\n\nclass TritonPythonModel(Model):\n    pass\n",
    "imported": "from models import TritonPythonModel\n",
    "made elsewhere": "import lib\n\nTritonPythonModel = lib.make()\n",
    "a metaclass": "class TritonPythonModel(metaclass=Meta):\n    pass\n",
    "a decorator": "@decorate\nclass TritonPythonModel:\n    pass\n",
    "patched": "class TritonPythonModel:\n    pass\n\nsetattr(TritonPythonModel, 'x', 1)\n",
    "a second class inside an if": "class TritonPythonModel:\n    pass\nif X:\n    class TritonPythonModel(B):\n        pass\n",
    "only inside an if": "if True:\n    class TritonPythonModel:\n        pass\n",
    "the name in a string": "class TritonPythonModel:\n    def f(self):\n        getattr(self, 'auto_complete_config')\n",
    "the name made of two strings": "class TritonPythonModel:\n    vars()['auto_complete' '_config'] = f\n",
    "a star import": "from impl import *\n",
    "a star import beside a class": "from impl import *\n\nclass TritonPythonModel:\n    pass\n",
    "object rebound": "from impl import Base as object\n\nclass TritonPythonModel(object):\n    pass\n",
    "object assigned": "import impl\nobject = impl.Base\n\nclass TritonPythonModel(object):\n    pass\n",
    "through globals": "globals()['TritonPythonModel'] = make()\n",
    "a full-width letter": "class TritonPythonModel:\n    def \uff41uto_complete_config(c):\n        return c\n",
    "UTF-7": "# coding: utf-7\nclass TritonPythonModel:\n    def auto+AF8-complete+AF8-config(c):\n        return c\n",
    "no class at all": "",
    "not Python": "class TritonPythonModel:\n    def execute(self, requests:\n",
    "nested too deep to parse": "x = " + "(" * 100000 + ")" * 100000 + "\n",
}


@pytest.mark.parametrize("text", MAY_COMPLETE.values(), ids=MAY_COMPLETE.keys())
def test_a_model_file_that_may_complete_its_config_says_so(text):
    assert completes_its_config(text.encode())


@pytest.mark.parametrize(
    "text",
    [PYTHON_MODEL, "class TritonPythonModel(object):\n    def execute(self, requests):\n        return []\n"],
    ids=["the add-one model", "an object subclass"],
)
def test_a_plain_model_file_does_not(text):
    assert not completes_its_config(source(text))


@pytest.mark.parametrize(
    ("text", "loads"),
    [
        ("import triton_python_backend_utils as pb\n\ndef f():\n    pb.load_model(model_name='x')\n", True),
        ("from triton_python_backend_utils import load_model\n", True),
        ("from triton_python_backend_utils import *\n", True),
        (
            "import triton_python_backend_utils as pb\nfrom keras.models import load_model\nm = load_model('w.h5')\n",
            False,
        ),
        (PYTHON_MODEL, False),
    ],
    ids=["pb_utils.load_model", "imported by name", "a star import", "keras's load_model", "the add-one model"],
)
def test_a_model_file_loading_models_as_it_runs_is_found(text, loads):
    assert loads_models(text.encode()) is loads


def test_a_model_loading_models_as_it_runs_keeps_auto_complete_on():
    loader = b"import triton_python_backend_utils as pb\n\nclass TritonPythonModel:\n    def initialize(self, args):\n        pb.load_model(model_name='other')\n"
    reader, _ = files({"/models/a/1/model.py": loader})
    why = why_auto_complete({"a": config('backend: "python"')}, {"a": [1]}, reader)
    assert why == "a/1/model.py may load other models as it runs (load_model)"


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
    reader, read = files({"/models/a/1/model.py": PYTHON_MODEL.encode(), "/models/a/2/model.py": PYTHON_MODEL.encode()})
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


# -- what the source cannot decide counts as completing (#48 item 5) -----------------------------

COMPLETE = "def _complete(config):\n    config.set_dynamic_batching()\n    return config\n\n\n"
EVADING = {
    "locals() in the class body": COMPLETE
    + "class TritonPythonModel:\n    locals()['auto_complete' + '_config'] = staticmethod(_complete)\n",
    "the frame's f_locals": "import sys\n\n"
    + COMPLETE
    + "class TritonPythonModel:\n    sys._getframe(0).f_locals.update({'auto_complete' + '_config': staticmethod(_complete)})\n",
    "a helper beside the model hooking __build_class__": "import helper  # hooks builtins.__build_class__\n\n"
    "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n",
    "a relative import": "from . import helper\n\nclass TritonPythonModel:\n    pass\n",
    "builtins by name": "import builtins\n\nclass TritonPythonModel:\n    pass\n",
    "the module's namespace": "import sys\n\nclass TritonPythonModel:\n    pass\n\nsys.modules[__name__].TritonPythonModel = object\n",
    "a module's __dict__": "import json\n\nclass TritonPythonModel:\n    pass\n\njson.__dict__.update(x=1)\n",
}


@pytest.mark.parametrize("text", EVADING.values(), ids=EVADING.keys())
def test_a_model_file_giving_its_class_the_method_unnamed_counts_as_completing(text):
    """Each was read as "does not complete": the test server ran it with auto-complete off, and
    the image's own command, with tritonserver's default, served another config."""
    assert completes_its_config(text.encode())


@pytest.mark.parametrize(
    "imports",
    [
        "import json\nimport os\n",
        "import numpy as np\nimport triton_python_backend_utils as pb_utils\n",
        "from typing import List\n",
    ],
)
def test_the_standard_library_numpy_and_the_backend_utilities_keep_a_model_plain(imports):
    assert not completes_its_config((imports + "\nclass TritonPythonModel:\n    pass\n").encode())


def test_validate_takes_an_unnamed_method_for_what_it_may_be(tmp_path):
    """A model without config.pbtxt whose method comes through locals() was refused as defining no
    auto_complete_config; it may well define one, which the server asks it."""
    from support.models import golden_case, write_tree
    from triton_release.models.validate import validate

    root = write_tree(
        tmp_path / "model_repository",
        {"m/1/model.py": EVADING["locals() in the class body"], "m/golden/basic.json": golden_case()},
    )
    assert not [p for p in validate(root).problems if "auto_complete_config" in p.message]
