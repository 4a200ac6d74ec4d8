"""Presentation: plain lines on a terminal, workflow commands inside GitHub Actions.

Step code reports what happened; this module decides how it looks.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator, TextIO

from triton_release.models.repository import Problem, display_path


def in_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


class Console:
    """Human lines go to stdout, or to stderr when stdout carries the JSON report."""

    def __init__(self, json_mode: bool = False, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.err = err or sys.stderr
        self.out = self.err if json_mode else (out or sys.stdout)

    def line(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def problem(self, problem: Problem, level: str = "error") -> None:
        self.line(f"{level}: {problem}" if level != "error" else str(problem))
        if in_actions():
            props = f"file={display_path(problem.path)}"
            if problem.line:
                props += f",line={problem.line}"
                if problem.col:
                    props += f",col={problem.col}"
            print(f"::{level} {props}::{_escape(problem.message)}", file=self.out, flush=True)

    def warning(self, message: str) -> None:
        self.line(f"warning: {message}")
        if in_actions():
            print(f"::warning::{_escape(message)}", file=self.out, flush=True)

    def failure(self, message: str) -> None:
        print(message, file=self.err, flush=True)
        if in_actions():
            print(f"::error::{_escape(message)}", file=self.err, flush=True)

    @contextmanager
    def group(self, title: str) -> Iterator[None]:
        if in_actions():
            print(f"::group::{title}", file=self.out, flush=True)
        try:
            yield
        finally:
            if in_actions():
                print("::endgroup::", file=self.out, flush=True)
