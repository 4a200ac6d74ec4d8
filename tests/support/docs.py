"""The code blocks of the project's Markdown pages, as the docs tests read them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from support.stack import ROOT

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
MARK = re.compile(r"^\s*<!--\s*snippet:\s*(?P<kind>[\w-]+)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    text: str  # dedented by the fence's indentation
    mark: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def yaml_blocks(page: Path) -> list[Block]:
    """The ```yaml (or ```yml) blocks of a Markdown page, with the snippet mark before each."""
    lines = page.read_text(encoding="utf-8").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, start = opening["indent"], i
        i += 1
        while i < len(lines) and not re.fullmatch(rf"{re.escape(indent)}```[ \t]*", lines[i]):
            i += 1
        assert i < len(lines), f"{page.relative_to(ROOT)}:{start + 1}: a code block that never closes"
        if opening["lang"].lower() in ("yaml", "yml"):
            body = [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[start + 1 : i]]
            before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            mark = MARK.match(before)
            blocks.append(Block(page, start + 1, "\n".join(body) + "\n", mark["kind"] if mark else None))
        i += 1
    return blocks
