"""Models calling models (BLS): the models a Python model's code asks for by name.

`pb_utils.InferenceRequest(model_name="add_sub", ...)` names its callee; the name is read from
the syntax tree, never by running the code. The reading follows what a model's code does with
the class: aliases (`import ... as`, `IR = pb_utils.InferenceRequest`, `getattr(pb_utils,
"InferenceRequest")`, `functools.partial(pb_utils.InferenceRequest, model_name=...)`), names
bound once to a string at module level, and the modules of the version folder that the model
file imports (relative or plain imports: the Python backend puts the version folder on
sys.path), transitively.

A request whose model the reading cannot tell (a name chosen at run time, the class handed
around) is a `Call` without a callee: validate warns about it, and until its callees are
declared in the model's config.pbtxt, kept with the model,

    parameters { key: "triton_release.depends_on" value: { string_value: "add_sub, sub_add" } }

the model counts as calling every other model: it is re-tested when any of them changes.
Named and declared callees are loaded with their caller, and re-test it when they change.

One file's syntax tree is read in models/calls/syntax.py; this module follows a version folder's
imports from file to file, keeps each file's facts by content, and reads the model's config.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.cache import Memo
from triton_release.models.calls.syntax import Facts, Reader

if TYPE_CHECKING:
    from triton_release.models.config.schema import model_config_pb2

DEPENDS_PARAMETER = "triton_release.depends_on"
DEFAULT_FILE = "model.py"
MAX_ROUNDS = 64  # a version folder's modules feeding each other aliases settle long before this


@dataclass(frozen=True)
class Call:
    callee: str | None  # None: the model is chosen at run time, or the request is built out of sight
    line: int
    file: str = ""  # the file of the version folder it is in; "" for a source read alone


FOUND = Memo("bls-calls", "2")  # source (and the aliases it imports) -> its facts: read once per content


def calls_in(source: str | bytes) -> list[Call]:
    """Every `InferenceRequest` that `source` builds, with the model it names (None: not readable
    from the code), by line; [] for a file that does not parse (validate reports that)."""
    return sorted((Call(callee, line) for callee, line in _facts(source, {}).calls), key=lambda c: c.line)


def folder_calls(model_file: str, sources: Mapping[str, bytes]) -> list[Call]:
    """The requests built by `model_file` and by the modules of its version folder it imports,
    transitively. `sources`: path inside the version folder (posix) -> content; its keys are
    the folder's Python files (iterated only when the code loads modules by computed names)."""
    if model_file not in sources:
        return []
    reached = {model_file}
    aliases: dict[str, dict[str, str]] = {model_file: {}}
    read: dict[str, tuple[dict, Facts]] = {}
    for _ in range(MAX_ROUNDS):
        for name in sorted(reached):
            wanted = aliases.get(name, {})
            if name not in read or read[name][0] != wanted:
                read[name] = (dict(wanted), _facts(sources[name], wanted))
        grown, brought = set(reached), {}
        for name in sorted(reached):
            facts = read[name][1]
            if facts.loads_any:
                grown.update(path for path in sources if path.endswith(".py"))
            files, imported = _links(name, facts.imports, sources)
            grown.update(files)
            brought[name] = _brought(imported, {n: read[n][1].exports for n in read})
        if grown == reached and brought == {n: aliases.get(n, {}) for n in reached}:
            break
        reached, aliases = grown, brought
    found = {Call(callee, line, name) for name in reached if name in read for callee, line in read[name][1].calls}
    return sorted(found, key=lambda c: (c.file != model_file, c.file, c.line, c.callee or ""))


def _links(name: str, imports: Iterable[tuple], sources: Mapping[str, bytes]) -> tuple[set[str], list[tuple]]:
    """The files of the version folder that `name`'s imports run, and what they bind there:
    ("module", binding, file) or ("name", binding, file, exported name) or ("star", file)."""
    package = name.split("/")[:-1]
    files: set[str] = set()
    bound: list[tuple] = []

    def module(parts: list[str]) -> str | None:
        for candidate in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])):
            if candidate in sources:
                return candidate
        return None

    def run(parts: list[str]) -> str | None:
        """Import the module `parts`: each package on the way is run too."""
        for i in range(1, len(parts)):
            found = module(parts[:i])
            if found:
                files.add(found)
        found = module(parts)
        if found:
            files.add(found)
        return found

    for entry in imports:
        if entry[0] == "import":
            _, dotted, asname = entry
            parts = dotted.split(".")
            target = run(parts)
            if asname and target:
                bound.append(("module", asname, target))
            elif not asname:
                for i in range(1, len(parts) + 1):
                    found = module(parts[:i])
                    if found:
                        bound.append(("module", ".".join(parts[:i]), found))
            continue
        _, level, dotted, imported, asname = entry
        if level and level - 1 > len(package):
            continue  # above the version folder: not one of its modules
        base = (package[: len(package) - (level - 1)] if level else []) + (dotted.split(".") if dotted else [])
        if not base and not level:
            continue
        owner = run(base)
        if imported == "*":
            if owner:
                bound.append(("star", owner))
            continue
        submodule = module([*base, imported])
        if submodule:
            files.add(submodule)
            bound.append(("module", asname or imported, submodule))
        elif owner:
            bound.append(("name", asname or imported, owner, imported))
    return files, bound


def _brought(imported: list[tuple], exports: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The aliases of the class that a file's imports bring in, by the name they have there."""
    found: dict[str, str] = {}
    for entry in imported:
        if entry[0] == "module":
            found.update({f"{entry[1]}.{name}": kind for name, kind in exports.get(entry[2], {}).items()})
        elif entry[0] == "star":
            found.update(exports.get(entry[1], {}))
        elif entry[3] in exports.get(entry[2], {}):
            found[entry[1]] = exports[entry[2]][entry[3]]
    return found


def _facts(source: str | bytes, aliases: Mapping[str, str]) -> Facts:
    text = source.encode() if isinstance(source, str) else source
    key = text + (b"\0aliases " + json.dumps(sorted(aliases.items())).encode() if aliases else b"")
    known = FOUND.get(key)
    if isinstance(known, dict):
        try:
            return Facts.from_json(known)
        except (KeyError, TypeError, ValueError):
            pass  # a memo of another shape: read the file again
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        found = Facts((), (), False, {})
    else:
        found = Reader(tree, aliases).facts()
    FOUND.put(key, found.to_json())
    return found


def declared(config: model_config_pb2.ModelConfig | None) -> list[str]:
    """The callees the model's config.pbtxt declares (comma- or space-separated names)."""
    if config is None or DEPENDS_PARAMETER not in config.parameters:
        return []
    return [name for name in re.split(r"[,\s]+", config.parameters[DEPENDS_PARAMETER].string_value) if name]


def model_file(config: model_config_pb2.ModelConfig | None) -> str:
    """The file the Python backend runs in each version folder."""
    return config.default_model_filename if config is not None and config.default_model_filename else DEFAULT_FILE


def callees(config: model_config_pb2.ModelConfig | None, found: Iterable[Call]) -> set[str]:
    """The models a model calls: named in its code, and declared."""
    return {call.callee for call in found if call.callee is not None} | set(declared(config))


def calls_any(config: model_config_pb2.ModelConfig | None, found: Iterable[Call]) -> bool:
    """A request whose model the code does not tell, and no declaration: it may call any model."""
    return not declared(config) and any(call.callee is None for call in found)


class _Folder(Mapping[str, bytes]):
    """A version folder's files in the working tree, read when asked for; iterated (its Python
    files) only when needed. A file whose real place is outside the model folder is not read."""

    def __init__(self, folder: Path, model: Path) -> None:
        self.folder, self.model = folder, model
        self._below = os.path.relpath(folder, model).split(os.sep)  # the version folder's name
        self._paths: dict[str, Path | None] = {}
        self._listed: set[str] | None = None
        self._tried = False

    def _path(self, name: str) -> Path | None:
        """The file `name` of the folder, when it is one inside the model folder: each name
        resolved once, and only when something is there (most names asked for are modules the
        code imports from elsewhere)."""
        if name not in self._paths:
            path = self.folder / name
            self._paths[name] = path if self._inside(name, path) else None
        return self._paths[name]

    def _inside(self, name: str, path: Path) -> bool:
        """Whether `path` (the folder's `name`) is a file inside the model folder: without a link
        below the model folder, it is, wherever that folder really is (one lstat a name below it);
        through a link, where it really is decides."""
        parts = [*self._below, *name.split("/")]
        first, listed = parts[len(self._below)], self._names()
        if listed is not None and first not in ("", ".", "..") and first not in listed:
            return False  # most names asked for: modules the code imports from elsewhere
        if "\0" in name:
            return False  # no file has such a name
        if not any(part in ("", ".", "..") for part in parts):
            current = os.fspath(self.model)
            for part in parts:
                current = os.path.join(current, part)
                try:
                    mode = os.lstat(current).st_mode
                except OSError:
                    return False  # nothing there
                if stat.S_ISLNK(mode):
                    break
            else:
                return stat.S_ISREG(mode)
        elif not os.path.lexists(path):
            return False
        real, model = os.path.realpath(path), os.path.realpath(self.model)
        return real.startswith(model + os.sep) and os.path.isfile(real)

    def _names(self) -> set[str] | None:
        """What the folder itself holds, by name (listed once); None: it cannot be listed."""
        if not self._tried:
            self._tried = True
            with contextlib.suppress(OSError):
                self._listed = set(os.listdir(self.folder))
        return self._listed

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._path(name) is not None

    def __getitem__(self, name: str) -> bytes:
        path = self._path(name)
        try:
            if path is not None:
                return path.read_bytes()
        except OSError:
            pass
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        for directory, folders, files in os.walk(self.folder):
            folders.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    yield Path(os.path.relpath(os.path.join(directory, name), self.folder)).as_posix()

    def __len__(self) -> int:
        return sum(1 for _ in self)


def version_sources(folder: Path, version: int | None) -> Mapping[str, bytes]:
    """The files of a model folder's version `version`, by path inside it ({} without a version)."""
    return {} if version is None else _Folder(Path(folder) / str(version), Path(folder))


def version_calls(folder: Path, config: model_config_pb2.ModelConfig | None, version: int | None) -> list[Call]:
    """The requests that `version` of the model in `folder` builds (its model file and the modules
    of the version folder it imports)."""
    return folder_calls(model_file(config), version_sources(folder, version))
