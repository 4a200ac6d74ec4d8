"""One error class per exit code. Only `session.run` turns them into messages and exit codes.

0 success; 1 the release was refused on its merits; 2 usage or settings; 3 infrastructure;
130 and 143 interrupted (SIGINT, SIGTERM).
"""

from __future__ import annotations

import textwrap
from typing import Any


class TritonReleaseError(Exception):
    """A failure with the user's fix in its message: one short paragraph."""

    exit_code = 1

    def __init__(self, message: str, *, details: list[str] | None = None, result: Any = None) -> None:
        paragraphs = textwrap.dedent(message).strip().split("\n\n")
        super().__init__("\n\n".join(" ".join(p.split()) for p in paragraphs))
        self.details = list(details or [])  # one line each, printed before the message
        self.result = result  # what the failed step found: rendered and reported

    @property
    def message(self) -> str:
        return str(self)


class Refused(TritonReleaseError):
    """The release was refused on its merits: invalid repository, failed load, golden mismatch."""

    exit_code = 1


class UsageError(TritonReleaseError):
    """A bad flag, setting or reference: the user's command or triton-release.yaml is at fault."""

    exit_code = 2


class InfrastructureError(TritonReleaseError):
    """Docker, the registry, git or the network is unreachable or broken."""

    exit_code = 3


def no_space(folder: object, doing: str) -> InfrastructureError:
    """A disk that filled up: where, while doing what, and how to choose another place."""
    return InfrastructureError(f"""
        No space left in {folder} while {doing}. Free some space there, or point TMPDIR at a disk
        with room for the models.""")


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: every `finally` runs (containers are removed), then the report is written.

    A KeyboardInterrupt, so that no `except Exception` swallows it and pytest stops its run."""

    def __init__(self, signal_name: str, exit_code: int) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.exit_code = exit_code
        self.published: str | None = None  # X.Y.Z was (or may be) in the registry when it came
