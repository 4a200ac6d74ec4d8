"""A problem located in the user's files, as `path:line:col: message`; paths shown as typed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def display_path(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when under it."""
    try:
        return os.path.relpath(path) if Path(path).is_absolute() and Path.cwd() in Path(path).parents else str(path)
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Problem:
    """One thing wrong in the repository, located as `path:line:col`."""

    path: Path
    message: str
    line: int | None = None
    col: int | None = None

    def location(self) -> str:
        loc = display_path(self.path)
        if self.line:
            loc += f":{self.line}"
            if self.col:
                loc += f":{self.col}"
        return loc

    def __str__(self) -> str:
        return f"{self.location()}: {self.message}"

    def to_json(self) -> dict:
        return {"path": display_path(self.path), "line": self.line, "col": self.col, "message": self.message}


def line_of(text: str, needle: str) -> int | None:
    """The 1-based line where `needle` first appears in `text`, for locating a parsed value."""
    index = text.find(needle)
    return None if index < 0 else text.count("\n", 0, index) + 1
