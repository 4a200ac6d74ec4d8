"""A private name (a leading underscore) stays in its module: no file of the package imports one
from another module, relative imports included. A name two modules share is public in their
subpackage; a private one imported from elsewhere means the boundary is in the wrong place."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "triton_release"


def _module_of(path: Path, package: Path) -> str:
    parts = ["triton_release", *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, own: str, is_package: bool) -> str:
    """The module an import names, a relative one resolved against the file's own module."""
    if not node.level:
        return node.module or ""
    package = own.split(".") if is_package else own.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_imports(path: Path, package: Path = PACKAGE) -> list[tuple[int, str, str]]:
    """(line, module, name) of each private name the file imports from another of the package's modules."""
    own = _module_of(path, package)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = _absolute(node, own, path.name == "__init__.py")
        if module.split(".")[0] != "triton_release" or module == own:
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append((node.lineno, module, alias.name))
    return found


def test_no_module_imports_another_ones_private_names():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for line, module, name in private_imports(path):
            found[(relative, module, name)] = f"src/triton_release/{relative}:{line}: imports {name} from {module}"
    assert not found, "make these public in their subpackage, or move them:\n" + "\n".join(found.values())


def test_relative_imports_are_resolved(tmp_path):
    package = tmp_path / "triton_release" / "models" / "golden"
    package.mkdir(parents=True)
    reader = package / "reader.py"
    reader.write_text(
        "from .format import _Step\nfrom ..tensors import _rows\nfrom . import _face\nfrom .reader import _own\n"
    )
    found = private_imports(reader, tmp_path / "triton_release")
    assert found == [
        (1, "triton_release.models.golden.format", "_Step"),
        (2, "triton_release.models.tensors", "_rows"),
        (3, "triton_release.models.golden", "_face"),
    ]
