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
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from triton_release.cache import Memo

DEPENDS_PARAMETER = "triton_release.depends_on"
DEFAULT_FILE = "model.py"
REQUEST = "InferenceRequest"
UTILS = "triton_python_backend_utils"
# pb_utils.InferenceRequest(request_id, correlation_id, inputs, requested_output_names, model_name, ...)
MODEL_NAME_AT = 4
CLASS, BOUND = "class", "bound"  # an alias of the class; a partial of it that already names its model
# calls that load code the reading cannot follow: every module of the version folder counts as imported
LOADERS = {"spec_from_file_location", "SourceFileLoader", "run_path", "run_module"}  # importlib's, runpy's
BUILTIN_LOADERS = {"exec", "execfile"}  # by their bare names: `request.exec()` runs a request, not code
MAX_ROUNDS = 64  # a version folder's modules feeding each other aliases settle long before this


@dataclass(frozen=True)
class Call:
    callee: str | None  # None: the model is chosen at run time, or the request is built out of sight
    line: int
    file: str = ""  # the file of the version folder it is in; "" for a source read alone


@dataclass(frozen=True)
class _Facts:
    """What one file's syntax tree says, given the aliases its imports bring in."""

    calls: tuple[tuple[str | None, int], ...]
    imports: tuple[tuple, ...]  # ("import", "a.b", asname) | ("from", level, "a.b" | "", name, asname)
    loads_any: bool  # loads code by a computed name or path
    exports: Mapping[str, str]  # simple names bound to the class (CLASS) or a partial of it (BOUND)

    def to_json(self) -> dict:
        return {
            "calls": [list(c) for c in self.calls],
            "imports": [list(i) for i in self.imports],
            "loads_any": self.loads_any,
            "exports": dict(self.exports),
        }

    @classmethod
    def from_json(cls, data: dict) -> _Facts:
        """The facts a memo kept; ValueError for anything of another shape."""
        calls = tuple((callee, line) for callee, line in data["calls"])
        imports = tuple(tuple(entry) for entry in data["imports"])
        exports = dict(data["exports"])
        shapes = {"import": (str, str, str), "from": (str, int, str, str, str)}
        if not (
            all((callee is None or isinstance(callee, str)) and type(line) is int for callee, line in calls)
            and all(
                entry
                and entry[0] in shapes
                and len(entry) == len(shapes[entry[0]])
                and all(type(v) is t for v, t in zip(entry, shapes[entry[0]]))
                for entry in imports
            )
            and all(isinstance(k, str) and v in (CLASS, BOUND) for k, v in exports.items())
            and type(data["loads_any"]) is bool
        ):
            raise ValueError("not the facts of a file")
        return cls(calls, imports, data["loads_any"], exports)


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
    read: dict[str, tuple[dict, _Facts]] = {}
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


def _facts(source: str | bytes, aliases: Mapping[str, str]) -> _Facts:
    text = source.encode() if isinstance(source, str) else source
    key = text + (b"\0aliases " + json.dumps(sorted(aliases.items())).encode() if aliases else b"")
    known = FOUND.get(key)
    if isinstance(known, dict):
        try:
            return _Facts.from_json(known)
        except (KeyError, TypeError, ValueError):
            pass  # a memo of another shape: read the file again
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        found = _Facts((), (), False, {})
    else:
        found = _Reader(tree, aliases).facts()
    FOUND.put(key, found.to_json())
    return found


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _pairs(target: ast.AST, value: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, value) of an assignment, tuples unpacked element by element."""
    if (
        isinstance(target, (ast.Tuple, ast.List))
        and isinstance(value, (ast.Tuple, ast.List))
        and len(target.elts) == len(value.elts)
        and not any(isinstance(e, ast.Starred) for e in target.elts)
    ):
        for t, v in zip(target.elts, value.elts):
            yield from _pairs(t, v)
    else:
        yield target, value


def _bindings(node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _pairs(target, node.value)
    elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
        yield node.target, node.value


def _constants(tree: ast.Module) -> dict[str, str]:
    """Names bound exactly once in the file, at module level, to a string: `CALLEE = "add_sub"`."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names = [node.id]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.alias):
            names = [node.asname or node.name.split(".")[0]]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names = list(node.names) * 2  # rebound elsewhere: never a constant
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names = [node.name]
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names = [node.name]
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names = [node.rest]
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    found = {}
    for node in tree.body:
        for target, value in _bindings(node):
            if (
                isinstance(target, ast.Name)
                and counts.get(target.id) == 1
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            ):
                found[target.id] = value.value
    return found


class _Reader:
    """One file's syntax tree: the aliases of the class it binds, then every request it builds."""

    def __init__(self, tree: ast.Module, aliases: Mapping[str, str]) -> None:
        self.tree = tree
        self.aliases: dict[str, str] = dict(aliases)
        self.partials = {"partial", "functools.partial"}
        self.importers = {"__import__", "import_module", "importlib.import_module"}
        self.utils = {UTILS}
        self.constants = _constants(tree)
        self._bind()

    def _bind(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == REQUEST and alias.asname:
                        self.aliases[alias.asname] = CLASS
                    elif node.module == "functools" and alias.name == "partial":
                        self.partials.add(alias.asname or alias.name)
                    elif node.module == "importlib" and alias.name == "import_module":
                        self.importers.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == UTILS:
                        self.utils.add(alias.asname or alias.name)
                    elif alias.name == "functools":
                        self.partials.add(f"{alias.asname or alias.name}.partial")
                    elif alias.name == "importlib":
                        self.importers.add(f"{alias.asname or alias.name}.import_module")
        changed = True
        while changed:  # `A = IR` before `IR = pb_utils.InferenceRequest`: until nothing new is bound
            changed = False
            for node in ast.walk(self.tree):
                for target, value in _bindings(node):
                    key = _dotted(target)
                    if key is None:
                        continue
                    if _dotted(value) in self.utils and key not in self.utils:
                        self.utils.add(key)
                        changed = True
                    kind = self.kind(value)
                    if kind and self.aliases.get(key) != CLASS and self.aliases.get(key) != kind:
                        self.aliases[key] = kind  # CLASS wins over BOUND: calls of it must name their model
                        changed = True

    def kind(self, node: ast.AST) -> str | None:
        """CLASS when `node` evaluates to the request class (or may), BOUND for a partial of it that
        names the model, None otherwise."""
        if (
            isinstance(node, ast.Attribute)
            and node.attr == REQUEST
            or isinstance(node, ast.Name)
            and node.id == REQUEST
        ):
            return CLASS
        key = _dotted(node)
        if key is not None:
            return self.aliases.get(key)
        if not isinstance(node, ast.Call):
            return None
        func = _dotted(node.func)
        if func == "getattr" and len(node.args) >= 2:
            attribute = node.args[1]
            if isinstance(attribute, ast.Constant):
                return CLASS if attribute.value == REQUEST else None
            return CLASS if _dotted(node.args[0]) in self.utils else None  # getattr(pb_utils, name): may be it
        if func in self.partials and node.args:
            inner = self.kind(node.args[0])
            return BOUND if inner and self._model_argument(node, 1) is not None else inner
        return None

    @staticmethod
    def _model_argument(call: ast.Call, skip: int = 0) -> ast.AST | str | None:
        """The expression a call gives as model_name; "hidden" behind *args or **kwargs; None: not given."""
        for keyword in call.keywords:
            if keyword.arg == "model_name":
                return keyword.value
        positional = call.args[skip:]
        for i, argument in enumerate(positional[: MODEL_NAME_AT + 1]):
            if isinstance(argument, ast.Starred):
                return "hidden"
            if i == MODEL_NAME_AT:
                return argument
        return "hidden" if any(k.arg is None for k in call.keywords) else None

    def names(self, node: ast.AST) -> set[str] | None:
        """The literal model names an expression can have, or None when it is computed."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.Name) and node.id in self.constants:
            return {self.constants[node.id]}
        if isinstance(node, ast.IfExp):
            body, orelse = self.names(node.body), self.names(node.orelse)
            return body | orelse if body is not None and orelse is not None else None
        if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
            return {"".join(str(cast(ast.Constant, v).value) for v in node.values)}
        return None

    def _named(self, argument: ast.AST | str | None, line: int) -> list[tuple[str | None, int]]:
        names = self.names(argument) if isinstance(argument, ast.AST) else None
        return [(name, line) for name in sorted(names)] if names else [(None, line)]

    def facts(self) -> _Facts:
        found: list[tuple[str | None, int]] = []
        imports: list[tuple] = []
        loads_any = False
        seen: set[int] = set()  # references of the class whose use is understood
        skipped: set[int] = set()  # annotations: types, never run as constructors
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args
                hints = [
                    a.annotation
                    for a in (
                        *arguments.posonlyargs,
                        *arguments.args,
                        *arguments.kwonlyargs,
                        arguments.vararg,
                        arguments.kwarg,
                    )
                    if a is not None and a.annotation
                ]
                for hint in [*hints, node.returns]:
                    if hint is not None:
                        skipped.update(id(n) for n in ast.walk(hint))
            elif isinstance(node, ast.AnnAssign):
                skipped.update(id(n) for n in ast.walk(node.annotation))
            elif isinstance(node, ast.Import):
                imports.extend(("import", alias.name, alias.asname or "") for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                imports.extend(
                    ("from", node.level, node.module or "", alias.name, alias.asname or "") for alias in node.names
                )
            elif isinstance(node, ast.Compare):
                seen.update(id(n) for n in (node.left, *node.comparators))
            for target, value in _bindings(node):
                if _dotted(target) is not None and self.kind(value):
                    seen.add(id(value))
            if not isinstance(node, ast.Call):
                continue
            func = _dotted(node.func)
            kind = self.kind(node.func)
            if kind:
                seen.add(id(node.func))
                argument = self._model_argument(node)
                if kind == CLASS or argument is not None:
                    found.extend(self._named(argument, node.lineno))
            if func in self.partials and node.args and self.kind(node.args[0]):
                seen.add(id(node.args[0]))
                argument = self._model_argument(node, 1)
                if argument is not None:
                    found.extend(self._named(argument, node.lineno))
            if func in ("isinstance", "issubclass"):
                for argument in node.args:
                    seen.update(id(n) for n in ast.walk(argument))
            last = func.rsplit(".", 1)[-1] if func else ""
            if func in self.importers and node.args:
                name = node.args[0]
                if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.strip("."):
                    level = len(name.value) - len(name.value.lstrip("."))
                    imports.append(
                        ("from", level, name.value.lstrip("."), "*", "") if level else ("import", name.value, "")
                    )
                else:
                    loads_any = True
            elif last in LOADERS or func in BUILTIN_LOADERS:
                loads_any = True
        for node in ast.walk(self.tree):  # the class anywhere else: handed around, built out of sight
            if id(node) in seen or id(node) in skipped:
                continue
            if isinstance(node, (ast.Name, ast.Attribute)) and not isinstance(node.ctx, ast.Load):
                continue
            if isinstance(node, (ast.Name, ast.Attribute, ast.Call)) and self.kind(node) == CLASS:
                found.append((None, node.lineno))
        exports = {name: kind for name, kind in self.aliases.items() if "." not in name}
        return _Facts(tuple(sorted(set(found), key=lambda c: (c[1], c[0] or ""))), tuple(imports), loads_any, exports)


def declared(config) -> list[str]:
    """The callees the model's config.pbtxt declares (comma- or space-separated names)."""
    if config is None or DEPENDS_PARAMETER not in config.parameters:
        return []
    return [name for name in re.split(r"[,\s]+", config.parameters[DEPENDS_PARAMETER].string_value) if name]


def model_file(config) -> str:
    """The file the Python backend runs in each version folder."""
    return config.default_model_filename if config is not None and config.default_model_filename else DEFAULT_FILE


def callees(config, found: Iterable[Call]) -> set[str]:
    """The models a model calls: named in its code, and declared."""
    return {call.callee for call in found if call.callee is not None} | set(declared(config))


def calls_any(config, found: Iterable[Call]) -> bool:
    """A request whose model the code does not tell, and no declaration: it may call any model."""
    return not declared(config) and any(call.callee is None for call in found)


class _Folder(Mapping[str, bytes]):
    """A version folder's files in the working tree, read when asked for; iterated (its Python
    files) only when needed. A file whose real place is outside the model folder is not read."""

    def __init__(self, folder: Path, model: Path) -> None:
        self.folder, self.model = folder, os.path.realpath(model)

    def _path(self, name: str) -> Path | None:
        path = self.folder / name
        real = os.path.realpath(path)
        return path if real.startswith(self.model + os.sep) and os.path.isfile(real) else None

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


def version_calls(folder: Path, config, version: int | None) -> list[Call]:
    """The requests that `version` of the model in `folder` builds (its model file and the modules
    of the version folder it imports)."""
    return folder_calls(model_file(config), version_sources(folder, version))
