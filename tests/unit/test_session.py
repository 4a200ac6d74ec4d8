"""A run's errors become exit codes by their type, its report is written whatever happened, and
cleanup never masks the error being reported."""

from __future__ import annotations

import io
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.reports import parse_report, read_report
from triton_release.console import Console
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.session import Session, run


@dataclass(frozen=True)
class Found:
    n: int

    def to_json(self) -> dict:
        return {"n": self.n}

    def facts(self) -> dict:
        return {"version": f"1.{self.n}.0"}


def session(tmp_path, command="release") -> tuple[Session, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return Session(command, Console(out=out, err=err)), out, err


def report_of(tmp_path) -> dict:
    return read_report(tmp_path / "report.json")


@pytest.mark.parametrize(
    ("error", "code"), [(Refused("no"), 1), (UsageError("bad flag"), 2), (InfrastructureError("registry down"), 3)]
)
def test_the_exit_code_comes_from_the_error_type(tmp_path, error, code):
    s, _, err = session(tmp_path)

    def body(s):
        s.step("one", None, lambda: Found(1))
        s.step("two", None, lambda: (_ for _ in ()).throw(error))

    assert run(s, body, report_path=str(tmp_path / "report.json")) == code
    report = report_of(tmp_path)
    assert report["ok"] is False and report["error"]["exit_code"] == code
    assert report["steps"]["one"]["ok"] and report["steps"]["one"]["n"] == 1
    assert report["steps"]["two"] == {**report["steps"]["two"], "ok": False, "exit_code": code}
    assert report["version"] == "1.1.0"
    assert error.message in err.getvalue()


def test_a_refusal_keeps_the_result_it_found(tmp_path):
    s, _, _ = session(tmp_path)
    shown = []

    def refuse():
        raise Refused("two cases failed", result=Found(7))

    assert run(s, lambda s: s.step("test", shown.append, refuse), report_path=str(tmp_path / "report.json")) == 1
    assert shown == [Found(7)]
    assert report_of(tmp_path)["steps"]["test"]["n"] == 7


def test_an_unexpected_error_exits_3_with_the_traceback_in_a_named_file(tmp_path):
    from triton_release import cache

    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    s, _, err = session(tmp_path)

    def body(s):
        s.step("build", None, lambda: {}["missing"])

    assert run(s, body, report_path=str(tmp_path / "report.json")) == 3
    report = report_of(tmp_path)
    log = report["log_file"]
    assert log and log in report["error"]["message"] and "KeyError" in Path(log).read_text()
    assert "Traceback" not in err.getvalue()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_cleans_up_writes_the_report_and_exits_128_plus_n(tmp_path, signum, code):
    s, _, _ = session(tmp_path)
    cleaned = []

    def body(s):
        def serve():
            try:
                os.kill(os.getpid(), signum)
            finally:
                cleaned.append("container removed")

        s.step("test", None, serve)

    assert run(s, body, report_path=str(tmp_path / "report.json")) == code
    assert cleaned == ["container removed"]
    assert report_of(tmp_path)["error"]["exit_code"] == code


def test_cleanup_failures_are_warnings_not_the_reported_error(tmp_path):
    s, out, _ = session(tmp_path)

    def body(s):
        try:
            raise Refused("golden mismatch")
        finally:
            logging.getLogger("triton_release").warning("could not remove the server container x")

    assert run(s, body, report_path=str(tmp_path / "report.json")) == 1
    assert report_of(tmp_path)["error"]["message"] == "golden mismatch"
    assert "warning: could not remove the server container x" in out.getvalue()


def test_an_unwritable_report_is_a_warning_after_the_work_is_done(tmp_path, capsys):
    s, out, _ = session(tmp_path)
    folder = tmp_path / "report.json"
    folder.mkdir()  # not writable as a file, even for root
    assert run(s, lambda s: s.step("push", None, lambda: Found(2)), report_path=str(folder)) == 0
    assert "could not write the report" in out.getvalue()
    assert parse_report(capsys.readouterr().out)["version"] == "1.2.0"  # it follows on stdout


def test_secrets_are_masked_line_by_line_and_annotations_escaped():
    out = io.StringIO()
    console = Console(out=out, err=out, ci=True)
    console.mask("first-line\nsecond-line")
    console.line("token first-line and second-line")
    console.warning("a\n::stop-commands::x")
    text = out.getvalue()
    assert "first-line" not in text.replace("::add-mask::first-line", "").replace(
        "::add-mask::first-line%0Asecond-line", ""
    )
    assert "token *** and ***" in text
    assert "::warning::a%0A::stop-commands::x" in text


def test_user_text_never_starts_a_workflow_command():
    out = io.StringIO()
    console = Console(out=out, err=out, ci=True)
    console.line("PASS a/x\n::stop-commands::tok\r::warning::forged")
    assert not any(line.startswith("::") for line in out.getvalue().splitlines())
