"""The Markdown of README.md and docs/**/*.md renders as written: every table is one block, its
header first, then its `| --- |` row, then rows of the header's number of cells. A blank line
inside a table ends it, and the rows after it render as a paragraph of pipes, which neither
GitHub nor `mkdocs build --strict` reports."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.stack import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
DELIMITER = re.compile(r"^:?-{3,}:?$")


def cells(line: str) -> list[str]:
    """A table row's cells, split as GitHub splits them: on every pipe not escaped by a backslash
    (a pipe inside a code span splits the cell too)."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", inner)]


@dataclass(frozen=True)
class Table:
    line: int  # of its first row, 1-based
    rows: tuple[str, ...]


def tables(text: str) -> list[Table]:
    """Each run of lines starting with a pipe, outside fenced code blocks."""
    found: list[Table] = []
    rows: list[str] = []
    start, fenced = 0, False
    for number, line in enumerate(text.split("\n") + [""], start=1):
        if FENCE.match(line):
            fenced = not fenced
        is_row = not fenced and line.lstrip().startswith("|")
        if is_row and not rows:
            start = number
        if is_row:
            rows.append(line)
        elif rows:
            found.append(Table(start, tuple(rows)))
            rows = []
    return found


def problems(table: Table) -> list[str]:
    if len(table.rows) < 2 or not all(DELIMITER.match(cell) for cell in cells(table.rows[1])):
        return [
            f"line {table.line}: rows without a header and a | --- | row (a table cut in two by a blank "
            "line renders as a paragraph of pipes)"
        ]
    width = len(cells(table.rows[0]))
    found = [f"line {table.line + 1}: the | --- | row has {len(cells(table.rows[1]))} cells, not {width}"]
    found = found if len(cells(table.rows[1])) != width else []
    return found + [
        f"line {table.line + i}: {len(cells(row))} cells, not the header's {width}"
        for i, row in enumerate(table.rows[2:], start=2)
        if len(cells(row)) != width
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_is_one_block_of_rows_as_wide_as_its_header(page: Path):
    found = [problem for table in tables(page.read_text(encoding="utf-8")) for problem in problems(table)]
    assert not found, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(found)


def test_the_check_finds_a_table_cut_in_two_and_a_row_of_the_wrong_width():
    text = (
        "| a | b |\n| --- | --- |\n| 1 | 2 |\n\n| 3 | 4 |\n\n```\n| in code |\n```\n| x | y |\n| --- | --- |\n| 1 |\n"
    )
    found = [problem for table in tables(text) for problem in problems(table)]
    assert found == [
        "line 5: rows without a header and a | --- | row (a table cut in two by a blank line renders as a "
        "paragraph of pipes)",
        "line 12: 1 cells, not the header's 2",
    ]
    assert cells(r"| `a \| b` | c |") == [r"`a \| b`", "c"]
