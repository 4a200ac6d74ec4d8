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
import sys
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.models.config.schema import model_config_pb2

if TYPE_CHECKING:
    import docker

NAME = "auto_complete_config"
BULK_OVER = 8  # files to read: above it, the image's small files are gathered in one run (devices.image_reader)
PYTHON_FILE = "model.py"  # the python backend's model file unless default_model_filename says otherwise


def completes_its_config(source: bytes) -> bool:
    """Whether a Python model's file may complete its config when Triton loads it: True wherever
    the source cannot decide it, so that the tests serve the model as the image's own command does
    (auto-complete on). It may not only when it parses as one plain top-level `class
    TritonPythonModel` (no base but `object`, no decorator, no metaclass) and nothing else could
    bring the method: no name or string naming auto_complete_config (as Python reads it: its
    coding, NFKC), no `import *`, `object` never rebound, the class never named elsewhere
    (imported, rebound, patched, an attribute of a module), no `globals`, `locals`, `vars`,
    `setattr`, `exec`, `eval` or `__import__`, no frame or namespace reached by attribute
    (`sys._getframe(0).f_locals`, `__dict__`, `builtins.__build_class__`), and no module imported
    but the standard library's (those that reach frames, builtins or code excepted), numpy and
    triton_python_backend_utils: any other, a helper beside the model included, may hook
    `builtins.__build_class__` and give the class the method as it is built. Read as a syntax
    tree, never run."""
    if NAME.encode() in source:
        return True
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True  # nobody can say
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == MODEL_CLASS]
    if len(classes) != 1 or not _plain(classes[0]):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == MODEL_CLASS and node is not classes[0]:
            return True
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not _trusted_import(node):
            return True
        if isinstance(node, ast.Attribute) and (node.attr in REACHES_NAMESPACES or node.attr == MODEL_CLASS):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name).rsplit(".", 1)[-1] in (MODEL_CLASS, "object"):
            return True
        if isinstance(node, ast.Name) and (node.id in DYNAMIC or node.id == MODEL_CLASS or _rebinds_object(node)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Attribute, ast.Name)) and _names_it(node):
            return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and NAME in unicodedata.normalize("NFKC", node.value)
        ):
            return True
    return False


def loads_models(source: bytes) -> bool:
    """Whether a Python model's file may load models itself as it runs (the Python backend's
    `triton_python_backend_utils.load_model`, BLS model management): models no config read here
    names. Any file that imports the utilities under a name it then takes `load_model` from, or
    takes it from them by name, or does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name == UTILS)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module == UTILS
            and any(a.name in ("load_model", "*") for a in node.names)
        ):
            return True
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "load_model"
        and isinstance(node.value, ast.Name)
        and node.value.id in modules
        for node in ast.walk(tree)
    )


MODEL_CLASS = "TritonPythonModel"
UTILS = "triton_python_backend_utils"
# what could add the method unnamed: names, and attributes that reach a frame's or a module's namespace
DYNAMIC = {"globals", "locals", "vars", "setattr", "exec", "eval", "compile", "__import__", "__build_class__"}
DYNAMIC |= {"__builtins__", "builtins"}
REACHES_NAMESPACES = {
    "_getframe",
    "currentframe",
    "f_locals",
    "f_globals",
    "f_builtins",
    "f_back",
    "modules",
    "__dict__",
    "__setattr__",
    "__build_class__",
    "__builtins__",
}
# the modules a model file may import and still be read as plain: the standard library's, less those
# that reach frames, builtins or code, and the two every Python model imports
TRUSTED_IMPORTS = frozenset(sys.stdlib_module_names) - {
    "builtins",
    "inspect",
    "ctypes",
    "gc",
    "importlib",
    "runpy",
    "code",
    "codeop",
    "pickle",
    "marshal",
    "copyreg",
    "types",
}
TRUSTED_IMPORTS |= {"numpy", "triton_python_backend_utils"}


def _trusted_import(node: ast.Import | ast.ImportFrom) -> bool:
    """Whether an import brings only modules of TRUSTED_IMPORTS (never one relative to the model's folder)."""
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in TRUSTED_IMPORTS
    return all(alias.name.split(".")[0] in TRUSTED_IMPORTS for alias in node.names)


def _plain(node: ast.ClassDef) -> bool:
    return (
        not node.keywords
        and not node.decorator_list
        and all(isinstance(base, ast.Name) and base.id == "object" for base in node.bases)
    )


def _rebinds_object(node: ast.Name) -> bool:
    return node.id == "object" and isinstance(node.ctx, (ast.Store, ast.Del))


def _names_it(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else node.name  # type: ignore[attr-defined]
    return NAME in unicodedata.normalize("NFKC", name)


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
            if source is not None and loads_models(source):
                return f"{name}/{version}/{filename} may load other models as it runs (load_model)"
    return None


def image_held(
    client: docker.DockerClient,
    image: str,
    versions: Mapping[str, Iterable[int]],
    *,
    built_from: Path | None = None,
) -> tuple[dict[str, model_config_pb2.ModelConfig | None], str | None]:
    """The config.pbtxt of each model of `versions` as `image` holds it (None: none, or it does not
    parse), and why a server of it that may load them at those versions needs auto-complete (None:
    it does not); read from one container created from the image (devices.image_reader).
    `built_from`: the model repository this run built `image` from, each version folder a layer
    addressed by its content: a version folder's files are read there (a round trip to the daemon
    less each), the configs (`warmup: golden` may have written them) from the image still."""
    from triton_release.models.devices import image_reader, parse_config

    def local(path: str) -> bytes | None:
        """/models/<model>/<version>/<file> from `built_from`; None: read it from the image."""
        parts = path.split("/")  # "", "models", model, version, file
        if built_from is None or len(parts) != 5 or not parts[3].isdigit():
            return None
        file = built_from.joinpath(*parts[2:])
        return file.read_bytes() if file.is_file() and not file.is_symlink() else None

    def held(path: str) -> bytes | None:
        found = local(path)
        return found if found is not None else read(path)

    reads = sum(1 + (0 if built_from is not None else len(set(folders))) for folders in versions.values())
    with image_reader(client, image, bulk=reads > BULK_OVER) as read:
        configs = {name: parse_config(read(f"/models/{name}/config.pbtxt")) for name in sorted(versions)}
        return configs, why_auto_complete(configs, versions, held)
