"""Models calling models (BLS): the models a Python model's code asks for by name.

`pb_utils.InferenceRequest(model_name="add_sub", ...)` names its callee; the name is read from
the file's syntax tree, never by running it. A name chosen at run time cannot be read: declare
such callees in the model's config.pbtxt, kept with the model:

    parameters { key: "triton_release.depends_on" value: { string_value: "add_sub, sub_add" } }

Both kinds are loaded with their caller, and a caller is re-tested when one of them changes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from triton_release.cache import Memo

DEPENDS_PARAMETER = "triton_release.depends_on"
DEFAULT_FILE = "model.py"


@dataclass(frozen=True)
class Call:
    callee: str | None   # None: the name is computed at run time
    line: int


FOUND = Memo("bls-calls", "1")  # source -> its calls: read once per content


def calls_in(source: str | bytes) -> list[Call]:
    """Every `InferenceRequest(...)` in `source` with the model it names (its first argument or
    model_name=); [] for a file that does not parse (validate reports that)."""
    known = FOUND.get(source)
    if isinstance(known, list):
        return [Call(callee, line) for callee, line in known]
    found = _calls_in(source)
    FOUND.put(source, [[call.callee, call.line] for call in found])
    return found


def _calls_in(source: str | bytes) -> list[Call]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name != "InferenceRequest":
            continue
        argument = next((k.value for k in node.keywords if k.arg == "model_name"), node.args[0] if node.args else None)
        literal = isinstance(argument, ast.Constant) and isinstance(argument.value, str)
        found.append(Call(argument.value if literal else None, node.lineno))
    return sorted(found, key=lambda call: call.line)


def declared(config) -> list[str]:
    """The callees the model's config.pbtxt declares (comma- or space-separated names)."""
    if config is None or DEPENDS_PARAMETER not in config.parameters:
        return []
    return [name for name in re.split(r"[,\s]+", config.parameters[DEPENDS_PARAMETER].string_value) if name]


def model_file(config) -> str:
    """The file the Python backend runs in each version folder."""
    return (config.default_model_filename if config is not None and config.default_model_filename
            else DEFAULT_FILE)


def callees(config, source: str | bytes | None) -> set[str]:
    """The models a model calls: named in its code, and declared."""
    named = {call.callee for call in calls_in(source)} if source is not None else set()
    return (named - {None}) | set(declared(config))


def source_of(folder: Path, config, version: int | None) -> bytes | None:
    """The model file of `version` in a model folder, or None."""
    if version is None:
        return None
    try:
        return (folder / str(version) / model_file(config)).read_bytes()
    except OSError:
        return None
