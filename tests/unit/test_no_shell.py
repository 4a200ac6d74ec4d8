"""Nothing runs through a shell: commands are lists, in src/ and in the stack script alike."""

from __future__ import annotations

import re

from support.stack import ROOT


def test_nothing_runs_through_a_shell():
    offenders = []
    for path in sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "stack").rglob("*.py")):
        text = path.read_text()
        for pattern in (r"shell\s*=\s*True", r"os\.system\(", r"os\.popen\("):
            offenders += [f"{path.relative_to(ROOT)}: {pattern}" for _ in re.finditer(pattern, text)]
    assert not offenders
    assert (ROOT / "src" / "triton_release" / "action" / "main.py").exists()  # the scan sees the action's code
