"""Imports run one way: each folder (or top-level module) of the package imports only from those
below it in LAYERS, lazy and type-checking imports included. docs/contributing.md's table lists
them in this order and says what each holds; a new part takes its place in both."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "triton_release"

# top to bottom: the front doors, their requests, the composition, the steps, the domains, the ground floor
LAYERS = [
    "__main__",
    "cli",
    "action",
    "requests",
    "fanout",
    "release",
    "steps",
    "evidence",
    "registry",
    "image",
    "server",
    "history",
    "models",
    "session",
    "console",
    "processes",
    "cache",
    "settings",
    "contract",
    "signals",
    "progress",
    "problems",
    "files",
    "errors",
]


def _unit(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def _imported(tree: ast.AST) -> set[str]:
    """The package's folders and modules a file imports from, by their first name."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    found = set()
    for name in names:
        parts = name.split(".")
        if parts[0] == "triton_release" and len(parts) > 1:
            target = PACKAGE / parts[1]
            if target.is_dir() or target.with_suffix(".py").exists():
                found.add(parts[1])
    return found


def test_every_part_of_the_package_has_its_layer():
    units = {_unit(path) for path in PACKAGE.rglob("*.py")} - {"__init__"}
    assert units <= set(LAYERS), f"give {sorted(units - set(LAYERS))} a place in LAYERS"


def test_imports_only_run_down():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _unit(path)
        if source == "__init__":
            continue
        level = LAYERS.index(source)
        for target in _imported(ast.parse(path.read_text(), str(path))):
            if target != source and LAYERS.index(target) < level:
                upward.append(f"{path.relative_to(PACKAGE)} imports {target}, which stands above {source}")
    assert not upward, "\n".join(upward)
