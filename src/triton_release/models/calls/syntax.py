"""One Python file's syntax tree, read for the requests it builds (`Reader`): the aliases of
`InferenceRequest` it binds (`import ... as`, assignments, `getattr`, `functools.partial`), the names
bound once to a string at module level, the modules it imports or loads, and the aliases it offers
the files that import it; what it finds is a file's `Facts`. Nothing is run. (Following a version
folder's imports from file to file, and the model's config: models/calls/__init__.py.)"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import cast

REQUEST = "InferenceRequest"
UTILS = "triton_python_backend_utils"
# pb_utils.InferenceRequest(request_id, correlation_id, inputs, requested_output_names, model_name, ...)
MODEL_NAME_AT = 4
CLASS, BOUND = "class", "bound"  # an alias of the class; a partial of it that already names its model
# calls that load code the reading cannot follow: every module of the version folder counts as imported
LOADERS = {"spec_from_file_location", "SourceFileLoader", "run_path", "run_module"}  # importlib's, runpy's
BUILTIN_LOADERS = {"exec", "execfile"}  # by their bare names: `request.exec()` runs a request, not code


@dataclass(frozen=True)
class Facts:
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
    def from_json(cls, data: dict) -> Facts:
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
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
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


class Reader:
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

    def facts(self) -> Facts:
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
        return Facts(tuple(sorted(set(found), key=lambda c: (c[1], c[0] or ""))), tuple(imports), loads_any, exports)
