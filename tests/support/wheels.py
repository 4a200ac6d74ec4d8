"""Tiny wheels made on the spot, and a pip that sees only them: environments resolve offline."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_wheel(
    folder: Path, name: str, version: str, files: dict[str, str] | None = None, requires: tuple[str, ...] = ()
) -> Path:
    """A pure-Python wheel `name`-`version` holding `files` (default: a module `name` whose
    __version__ is `version`), depending on `requires`."""
    module = name.replace("-", "_")
    files = files if files is not None else {f"{module}/__init__.py": f"__version__ = {version!r}\n"}
    info = f"{module}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    entries = {
        **files,
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},sha256={_digest(text)},{len(text.encode())}\n" for path, text in entries.items())
    entries[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in sorted(entries.items()):
            archive.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), text)
    return wheel


def _digest(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


def offline_index(monkeypatch, folder: Path) -> None:
    """pip (run by the tool) finds packages in `folder` only."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_CONSTRAINT", "")
