"""Presentation: plain lines on a terminal, workflow commands inside GitHub Actions.

Steps return typed results; this package alone turns them into lines. One method per kind of
result (`validation`, `changes`, `golden_run`, `pushed` ...), used by the single commands and
by `release` alike, so the two can never drift. Warnings logged by domain code (the
`triton_release` logger) arrive here too. Secrets given to `mask` never leave it.

Text that users and models wrote (file names, a model's error message, a server's log lines) is
shown, never obeyed: every line printed has its control characters escaped (`escape_controls`),
so none colours, moves the cursor or rewrites a line; a model's text is kept on the line that
shows it (its line feeds escaped too); and in Actions no line of it becomes a workflow command
(`defuse_commands`).

`Console` is one class made of a core (`core`: streams, masking, annotations, groups, progress)
and the renderers of each domain's results (`release`, `golden`, `images`, `fanout`); the text
escaping is `escaping`. Callers import from here.
"""

from __future__ import annotations

from triton_release.console.core import ConsoleCore
from triton_release.console.escaping import defuse_commands, escape_controls, escape_data, escape_property
from triton_release.console.fanout import FanoutLines
from triton_release.console.golden import GoldenLines
from triton_release.console.images import ImageLines
from triton_release.console.release import ReleaseLines

__all__ = ["Console", "ConsoleCore", "defuse_commands", "escape_controls", "escape_data", "escape_property"]


class Console(ReleaseLines, GoldenLines, ImageLines, FanoutLines):
    """Human lines go to stdout, or to stderr when stdout carries the JSON report; one method per
    kind of step result, which callers hand to `session.step` (`console.built`)."""
