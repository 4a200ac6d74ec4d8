"""One error class per exit code. Only `cli.main` turns them into messages and exit codes.

0 success; 1 the release was refused on its merits; 2 usage or settings; 3 infrastructure.
"""

from __future__ import annotations

import textwrap


class TritonReleaseError(Exception):
    """A failure with the user's fix in its message: one short paragraph."""

    exit_code = 1

    def __init__(self, message: str, *, details: list[str] | None = None, report: dict | None = None) -> None:
        paragraphs = textwrap.dedent(message).strip().split("\n\n")
        super().__init__("\n\n".join(" ".join(p.split()) for p in paragraphs))
        self.details = list(details or [])  # one line each, printed before the message
        self.report = report or {}          # what the failed step found, for the JSON report

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
    """Docker, the registry or the network is unreachable or broken."""

    exit_code = 3
