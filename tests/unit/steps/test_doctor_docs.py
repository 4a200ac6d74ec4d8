"""docs/cli.md's table of doctor's rows names every row the step prints, in its order; the disk
figures docs/troubleshooting.md gives are image/disk.py's."""

from __future__ import annotations

import re

from support.stack import ROOT
from triton_release.image import disk
from triton_release.steps.doctor import ROWS


def section(page: str, heading: str) -> str:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_the_cli_page_names_every_row_in_order():
    table = section("cli.md", "## `triton-release doctor`")
    assert re.findall(r"^\| `([^`]+)` \|", table, flags=re.M) == list(ROWS)


def test_the_disk_figures_are_the_codes():
    text = " ".join(section("troubleshooting.md", "## The daemon's disk").split())
    assert disk.UNPACKED == 2.0 and "(twice the download" in text
    assert disk.RELEASE_COPIES == 2 and "adds the model repository twice" in text
    assert disk.GiB == disk.HEADROOM and "and 1 GiB" in text
    ten = 10 * disk.GiB
    assert disk.need(ten, 0).pull == 3 * ten  # the download, and twice it unpacked, both at once
    assert disk.need(None, 5).total == 2 * 5 + disk.GiB
    assert "1 GiB besides" in section("cli.md", "## `triton-release doctor`")
