"""Whether Triton's auto-complete can change what a server of an image serves.

With auto-complete on (tritonserver's default), the Python backend starts a stub process for each
model it loads only to call `TritonPythonModel.auto_complete_config`, then stops it and starts the
model's own: about a second and a quarter of every load on a 2-core runner, for a model that does
not complete its config. A test server is started with `--disable-auto-complete-config` only when
no model it may load can be changed by it, as the image under test holds them: each has a
config.pbtxt that parses, is a `backend: "python"` model or an ensemble, and each of its version
folders' model file neither names `auto_complete_config` nor takes TritonPythonModel from a base
class or an import (either may bring one). Anything else, or a file that cannot be read, keeps
auto-complete on: what is served is then what tritonserver's defaults serve, and when it is off,
the same config is served (tests/integration/test_auto_complete_served.py).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from triton_release.models.config.schema import model_config_pb2

if TYPE_CHECKING:
    import docker

NAME = "auto_complete_config"
BULK_OVER = 4  # models: above it, the image's small files are gathered in one run (devices.image_reader)
PYTHON_FILE = "model.py"  # the python backend's model file unless default_model_filename says otherwise


def completes_its_config(source: bytes) -> bool:
    """Whether a Python model's file may complete its config when Triton loads it: it names
    auto_complete_config anywhere (a method, an attribute, a string), a TritonPythonModel of it has a
    base class, a decorator or a metaclass, or the name is imported or used (either may bring the
    method), or it is not Python that parses (nobody can say). Read as a syntax tree, never run."""
    if NAME.encode() in source:
        return True
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "TritonPythonModel":
            plain = all(isinstance(base, ast.Name) and base.id == "object" for base in node.bases)
            if not plain or node.keywords or node.decorator_list:
                return True
        elif _names_the_class(node):  # imported, rebound or patched: it may come with the method
            return True
    return False


def _names_the_class(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "TritonPythonModel"
    return isinstance(node, ast.alias) and (node.asname or node.name).rsplit(".", 1)[-1] == "TritonPythonModel"


def why_auto_complete(
    configs: Mapping[str, model_config_pb2.ModelConfig | None],
    versions: Mapping[str, Iterable[int]],
    read: Callable[[str], bytes | None],
) -> str | None:
    """Why a server loading the models of `configs` (their config.pbtxt as the image holds it, None
    when it has none or it does not parse) needs auto-complete, or None when no model can be
    changed by it. `versions`: each model's version folders in the image (its label; none known,
    auto-complete stays on). `read(path)`: a file of the image's /models, None when absent."""
    for name, config in sorted(configs.items()):
        if config is None:
            return f"{name} has no config.pbtxt that parses: Triton completes it"
        if config.platform == "ensemble":
            continue
        if config.backend != "python":
            return f"{name} is served by the {config.backend or config.platform or 'unnamed'} backend, which may complete it"
        filename = config.default_model_filename or PYTHON_FILE
        held = sorted(set(versions.get(name, ())))
        if not held:  # an image this tool did not build: Triton may load a version nobody read
            return f"the image does not say which version folders of {name} it holds"
        for version in held:
            source = read(f"/models/{name}/{version}/{filename}")
            if source is not None and completes_its_config(source):
                return f"{name}/{version}/{filename} may complete its config ({NAME})"
    return None


def image_held(
    client: docker.DockerClient, image: str, versions: Mapping[str, Iterable[int]]
) -> tuple[dict[str, model_config_pb2.ModelConfig | None], str | None]:
    """The config.pbtxt of each model of `versions` as `image` holds it (None: none, or it does not
    parse), and why a server of it that may load them at those versions needs auto-complete (None:
    it does not); read from one container created from the image and never started."""
    from triton_release.models.devices import image_reader, parse_config

    with image_reader(client, image, bulk=len(versions) > BULK_OVER) as read:
        configs = {name: parse_config(read(f"/models/{name}/config.pbtxt")) for name in sorted(versions)}
        return configs, why_auto_complete(configs, versions, read)
