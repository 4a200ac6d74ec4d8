"""One subject per module, and a family of modules is a subpackage: no two modules of one folder
of the package share a name's first word (`golden_format`, `golden_reader` would be `golden/`)."""

from __future__ import annotations

from collections import defaultdict

from support.stack import ROOT

PACKAGE = ROOT / "src" / "triton_release"


def test_no_folder_holds_a_family_of_modules_sharing_a_prefix():
    families: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        if path.stem != "__init__" and "_" in path.stem.strip("_"):
            families[(str(path.parent.relative_to(PACKAGE)), path.stem.split("_")[0])].append(path.name)
    found = {key: sorted(names) for key, names in families.items() if len(names) > 1}
    assert not found, f"make each family a subpackage (prefix/ with one module a subject): {found}"
