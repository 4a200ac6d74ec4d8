"""The README's main command, as a user types it."""

from __future__ import annotations

import subprocess

from helpers import ROOT


def test_make_demo(stack):
    result = subprocess.run(["make", "demo"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "5 models, 10 golden cases, no problems" in result.stdout
    assert "10 golden cases passed in triton-release-demo/models:candidate" in result.stdout
