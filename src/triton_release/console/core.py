"""The console's core: where lines go (stdout, or stderr beside the JSON report), masking of
secrets, workflow commands in Actions (annotations, groups), progress bars and the domain code's
logged warnings. Every line leaves through `_print`, escaped and masked; the renderers of step
results (the other modules of this package) only call `line`, `warning` and `problem`."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, TextIO

from triton_release.console.escaping import defuse_commands, escape_controls, escape_data, escape_property
from triton_release.problems import Problem, display_path
from triton_release.progress import LiveBars, PlainLines, Reporter, reporting

if TYPE_CHECKING:  # never imported at run time
    from triton_release.errors import TritonReleaseError


class ConsoleCore:
    """Human lines go to stdout, or to stderr when stdout carries the JSON report."""

    def __init__(
        self, *, json_mode: bool = False, ci: bool = False, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.err = err or sys.stderr
        self.out = self.err if json_mode else (out or sys.stdout)
        self._report_to: TextIO | None = None  # where the JSON report goes: stdout, unless it was closed
        self.ci = ci
        self._secrets: list[str] = []
        self._live: LiveBars | None = None  # the bars on the terminal, while a step runs

    def mask(self, secret: str) -> None:
        """Never print `secret` (nor any of its lines); in Actions, have the runner mask it too."""
        for part in {secret, *secret.splitlines()}:
            if part.strip():
                self._secrets.append(part)
                if self.ci:
                    print(f"::add-mask::{escape_data(part)}", file=self.out, flush=True)
        self._secrets.sort(key=len, reverse=True)

    def _masked(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _print(self, text: str, stream: TextIO | None = None) -> None:
        stream = stream or self.out
        text = escape_controls(self._masked(text), lines=True)  # every line written: no control character
        try:
            if self._live is None:
                print(text, file=stream, flush=True)
                return
            with self._live.paused():  # a line printed under a live bar: the bar moves below it
                print(text, file=stream, flush=True)
        except BrokenPipeError:
            self._closed(stream)

    def _closed(self, stream: TextIO) -> None:
        """The reader of `stream` went away (`release | grep -m1 ...`, `changed --json | true`):
        what follows on it goes nowhere, and the work goes on. A reader that stops reading is no
        request to stop: a release stopped there would be cut between its steps (a bump written,
        a push half done), so it ends as it would have, with its exit code and its report file."""
        devnull = open(os.devnull, "w")  # noqa: SIM115 (kept open: it stands in for the stream from here on)
        with suppress(OSError, ValueError):
            os.dup2(devnull.fileno(), stream.fileno())  # nor does Python's last flush fail at exit
        if stream is self.out:
            self.out = devnull
        if stream is self.err:
            self.err = devnull
        if stream is sys.stdout:
            self._report_to = devnull

    def report(self, text: str) -> None:
        """The JSON report on stdout (--json), as it is: no escaping, no masking (it holds no secret)."""
        stream = self._report_to or sys.stdout
        try:
            print(text, file=stream, flush=True)
        except BrokenPipeError:
            self._closed(stream)

    def _text(self, text: str, stream: TextIO | None = None) -> None:
        """Lines that may hold user text (file names, model messages): in Actions, none of them may
        be a workflow command, however the text was made (a CR starts no line: it is escaped)."""
        if self.ci:
            text = "\n".join(defuse_commands(line) for line in text.split("\n"))
        self._print(text, stream)

    def line(self, text: str = "") -> None:
        self._text(text)

    def warning(self, message: str, problem: Problem | None = None) -> None:
        self._text(f"warning: {problem or message}")
        if self.ci:
            self._print(
                f"::warning{self._where(problem)}::{escape_data(self._masked(problem.message if problem else message))}"
            )

    def problem(self, problem: Problem) -> None:
        self._text(str(problem))
        if self.ci:
            self._print(f"::error{self._where(problem)}::{escape_data(self._masked(problem.message))}")

    @staticmethod
    def _where(problem: Problem | None) -> str:
        if problem is None:
            return ""
        props = f"file={escape_property(display_path(problem.path))}"
        if problem.line:
            props += f",line={problem.line}"
            if problem.col:
                props += f",col={problem.col}"
        return " " + props

    def failure(self, error: TritonReleaseError | str, details: Sequence[str] = ()) -> None:
        message = error if isinstance(error, str) else error.message
        for line in details or getattr(error, "details", ()):
            self._text(line)
        self._text(message, self.err)
        if self.ci:
            self._print(f"::error::{escape_data(self._masked(message))}", self.err)

    @contextmanager
    def group(self, title: str, timed: bool = False) -> Iterator[None]:
        """A folded log group in Actions; with `timed`, a closing line with the step's time."""
        if self.ci:
            self._print(f"::group::{title}")
        start = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            if self.ci:
                self._print("::endgroup::")
        if timed and ok:
            self._print(f"{title}: done in {time.perf_counter() - start:.1f} s")

    @contextmanager
    def progress(self) -> Iterator[Reporter]:
        """Where the step's long parts (requirements, layers, push, loading, cases) show progress for
        the block's duration: a live bar on a terminal; in Actions, or into a file or pipe, plain
        lines, at most one every few seconds per task (inside the step's group)."""
        live = not self.ci and _terminal(self.out)
        reporter = LiveBars(self.out) if live else PlainLines(self.line)
        outer, self._live = self._live, reporter if isinstance(reporter, LiveBars) else self._live
        try:
            with reporting(reporter):
                yield reporter
        finally:
            reporter.close()
            self._live = outer

    @contextmanager
    def logging_to_console(self) -> Iterator[None]:
        """Warnings that domain code logs become console warnings for the duration."""
        logger = logging.getLogger("triton_release")
        handler = _ConsoleHandler(self)
        logger.addHandler(handler)
        logger.propagate = False
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.propagate = True


def _terminal(stream: TextIO) -> bool:
    """Whether a live bar can be drawn on `stream`: a terminal, with a size (a pseudo-terminal
    nobody sized is 0 by 0)."""
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False
    try:
        return min(os.get_terminal_size(stream.fileno())) > 0
    except (OSError, ValueError):  # a stream without a file descriptor: its word, then
        return True


class _ConsoleHandler(logging.Handler):
    def __init__(self, console: ConsoleCore) -> None:
        super().__init__(logging.WARNING)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.warning(record.getMessage())
