"""One run of a command: its steps recorded as they finish, its errors turned into exit codes,
its report written whatever happened.

The report is the run's own state: each step's typed result, its time and whether it passed,
plus the facts results offer (`version`, `image`, `digest`, `changed_models`, `released`).
The CLI and the action both run their commands through `run`, so both exit, interrupt and
report the same way.

Its shape is published as a JSON Schema (report.schema.json, in this package; docs/report.md):
every top-level key the schema names is in every report, null where the run has none, and
`schema_version` says which version of the schema it follows.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from triton_release.cache import cache_dir
from triton_release.console import Console
from triton_release.errors import Interrupted, TritonReleaseError
from triton_release.files import write_atomic
from triton_release.signals import checkpoint, closing, signals_as_interrupts

T = TypeVar("T")
P = ParamSpec("P")

SCHEMA_FILE = "report.schema.json"


@cache
def report_schema() -> dict:
    """The JSON Schema every report follows, as published in the package."""
    return json.loads(resources.files("triton_release").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def schema_version() -> int:
    return int(report_schema()["properties"]["schema_version"]["const"])


def report_keys() -> tuple[str, ...]:
    """The top-level keys of every report, in the schema's order."""
    return tuple(report_schema()["required"])


@dataclass
class StepRecord:
    result: Any  # a typed result with to_json(), or None when the step failed without one
    seconds: float
    ok: bool
    exit_code: int = 0

    def to_json(self) -> dict:
        data = self.result.to_json() if self.result is not None else {}
        data = {**data, "seconds": round(self.seconds, 3), "ok": self.ok}
        if not self.ok:
            data["exit_code"] = self.exit_code
        return data


@dataclass
class Report:
    command: str
    steps: dict[str, StepRecord] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    error: TritonReleaseError | None = None
    interrupted: Interrupted | None = None
    log_file: str | None = None

    def record(self, name: str, record: StepRecord) -> None:
        self.steps[name] = record
        if record.result is not None and hasattr(record.result, "facts"):
            self.facts.update(record.result.facts())

    def result(self, name: str) -> Any:
        record = self.steps.get(name)
        return record.result if record else None

    @property
    def exit_code(self) -> int:
        if self.interrupted is not None:
            return self.interrupted.exit_code
        return self.error.exit_code if self.error is not None else 0

    def error_json(self) -> dict | None:
        if self.interrupted is not None:
            return {
                "exit_code": self.interrupted.exit_code,
                "message": f"interrupted by {self.interrupted.signal_name}",
            }
        if self.error is not None:
            return {"exit_code": self.error.exit_code, "message": self.error.message}
        return None

    def to_json(self) -> dict:
        """The report as the schema gives it: every top-level key, null where there is no value.
        A fact the schema does not name is kept too (and fails the tests' validation: add it to
        the schema, with a new schema_version)."""
        known = {
            "schema_version": schema_version(),
            "command": self.command or None,
            "ok": self.exit_code == 0,
            "error": self.error_json(),
            "log_file": self.log_file or None,
            "steps": {name: record.to_json() for name, record in self.steps.items()},
        }
        data = {key: known[key] if key in known else self.facts.get(key) for key in report_keys()}
        return {**data, **{key: value for key, value in self.facts.items() if key not in data}}


class Session:
    """Runs steps: each in its log group, timed, with its progress shown, its result recorded
    and rendered."""

    def __init__(self, command: str, console: Console, *, timed: bool = False) -> None:
        self.report = Report(command)
        self.console = console
        self.timed = timed  # a "done in" line per step (multi-step commands)

    def step(
        self,
        name: str,
        show: Callable[[Any], None] | None,
        run: Callable[P, T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run `run(*args, **kwargs)` as the step `name` (its arguments checked against `run`'s
        signature by the type checker), its result recorded in the report and shown by `show`."""
        checkpoint()
        start = time.perf_counter()
        with self.console.group(name, timed=self.timed), self.console.progress():
            try:
                result = run(*args, **kwargs)
                checkpoint()
            except TritonReleaseError as exc:
                found = None if getattr(exc, "recorded_by", None) else exc.result  # a nested step's result is its own
                self.report.record(name, StepRecord(found, time.perf_counter() - start, False, exc.exit_code))
                exc.recorded_by = getattr(exc, "recorded_by", None) or name  # type: ignore[attr-defined]
                if found is not None and show is not None:
                    show(found)
                raise
            except Interrupted as exc:
                self.report.record(name, StepRecord(None, time.perf_counter() - start, False, exc.exit_code))
                raise
            except KeyboardInterrupt:
                self.report.record(name, StepRecord(None, time.perf_counter() - start, False, 130))
                raise
            except BaseException:
                self.report.record(name, StepRecord(None, time.perf_counter() - start, False, 3))
                raise
            self.report.record(name, StepRecord(result, time.perf_counter() - start, True))
            if show is not None and result is not None:
                show(result)
        return result


def _log_traceback(exc: BaseException) -> str:
    """The traceback of an unexpected error, in a file the message names."""
    text = "".join(traceback.format_exception(exc))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    for folder in (cache_dir() / "logs", Path(tempfile.gettempdir())):
        path = folder / f"triton-release-{stamp}-{os.getpid()}.log"
        try:
            write_atomic(path, text)
            return str(path)
        except (OSError, TritonReleaseError):
            continue
    return ""


def run(
    session: Session,
    body: Callable[[Session], None],
    *,
    report_path: str | None = None,
    json_out: bool = False,
    debug: bool = False,
    after: Callable[[Report], None] | None = None,
) -> int:
    """Run `body`, then write the report (and run `after`, e.g. the action's outputs); returns the
    exit code. The only place errors become exit codes: by their type, never by their text."""
    with session.console.logging_to_console(), signals_as_interrupts():
        _run(session, body, debug)
        late = closing()
        if late is not None and session.report.interrupted is None:
            session.report.interrupted = late  # it came after the work: say so, finish writing
            session.console.failure(
                f"interrupted by {late.signal_name} as the run ended: its work was done, the report is written."
            )
        write_report(session.report, report_path, json_out, session.console)
        if after is not None:
            after(session.report)
    return session.report.exit_code


def _run(session: Session, body: Callable[[Session], None], debug: bool) -> None:
    console, report = session.console, session.report
    try:
        body(session)
    except TritonReleaseError as exc:
        report.error = exc
        console.failure(exc)
        if debug:
            traceback.print_exc()
    except Interrupted as exc:
        report.interrupted = exc
        if exc.published:  # the release stands: the rerun finishes it forward, it is never undone
            console.failure(
                f"interrupted by {exc.signal_name} with {exc.published} in the registry (or maybe in it): "
                "stopped and cleaned up; the release stands, and a rerun of triton-release on this "
                "commit finishes it (its evidence, tags and commit)."
            )
        else:
            console.failure(f"interrupted by {exc.signal_name}: stopped and cleaned up; nothing more was done.")
    except KeyboardInterrupt:
        report.interrupted = Interrupted("SIGINT", 130)
        console.failure("interrupted by SIGINT: stopped and cleaned up; nothing more was done.")
    except Exception as exc:  # a bug: exit 3 with the traceback in a file
        report.log_file = _log_traceback(exc)
        report.error = _Unexpected(f"""
            Unexpected error: {exc.__class__.__name__}: {exc}. This is a bug in triton-release; the
            traceback is in {report.log_file or "(no writable folder for it)"}. Please report it with that
            file.""")
        console.failure(report.error)
        if debug or console.ci:  # in Actions the log file goes with the runner: show it here too
            with console.group("traceback"):
                console.line("".join(traceback.format_exception(exc)).rstrip())


class _Unexpected(TritonReleaseError):
    exit_code = 3


def write_report(report: Report, path: str | None, json_out: bool, console: Console) -> None:
    text = json.dumps(report.to_json(), indent=2)
    if path:
        try:
            write_atomic(Path(path), text + "\n")
        except (OSError, TritonReleaseError) as exc:  # what was done stays done: a warning, not a failure
            console.warning(
                f"could not write the report to {path} ({getattr(exc, 'strerror', None) or exc}); it follows on stdout"
            )
            json_out = True
    if json_out:
        console.report(text)
