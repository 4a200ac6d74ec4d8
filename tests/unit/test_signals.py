"""Signals are never lost: SIGHUP stops a run as SIGTERM does, a signal whose raise Python dropped
(it landed in a finalizer) is raised again at the next checkpoint, and a closed stdout is an
ordinary stop, not a bug."""

from __future__ import annotations

import io
import json
import os
import signal
import weakref

from triton_release.console import Console
from triton_release.session import Session, run


class _Closed(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise io.UnsupportedOperation("no file")


def test_sighup_stops_the_run_as_sigterm_does(tmp_path):
    cleaned = []
    session = Session("release", Console(out=io.StringIO(), err=io.StringIO()))

    def serve():
        try:
            os.kill(os.getpid(), signal.SIGHUP)
        finally:
            cleaned.append("container removed")

    assert run(session, lambda s: s.step("test", None, serve), report_path=str(tmp_path / "r.json")) == 129
    assert cleaned == ["container removed"]
    assert json.loads((tmp_path / "r.json").read_text())["error"]["message"] == "interrupted by SIGHUP"


def test_a_signal_dropped_in_a_finalizer_is_raised_at_the_next_step(tmp_path):
    ran = []
    session = Session("release", Console(out=io.StringIO(), err=io.StringIO()))

    class Resource:
        pass

    def body(s):
        def build():
            resource = Resource()
            # the handler's raise lands inside the finalizer, where Python reports and drops it
            weakref.finalize(resource, lambda: (os.kill(os.getpid(), signal.SIGTERM), sum(range(10_000))))
            del resource
            ran.append("build went on")
        s.step("build", None, build)
        s.step("push", None, lambda: ran.append("pushed"))

    assert run(session, body, report_path=str(tmp_path / "r.json")) == 143
    assert "pushed" not in ran
    assert json.loads((tmp_path / "r.json").read_text())["steps"]["build"]["ok"] is False


def test_a_closed_stdout_stops_the_run_as_a_signal_and_undoes(tmp_path):
    undone = []
    session = Session("release", Console(out=_Closed(), err=io.StringIO()))

    def body(s):
        try:
            s.step("bump", None, lambda: s.console.line("changed: done"))
            s.step("push", None, lambda: undone.append("pushed"))
        except BaseException:
            undone.append("bump undone")
            raise

    assert run(session, body, report_path=str(tmp_path / "r.json")) == 141
    assert undone == ["bump undone"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["error"]["message"] == "interrupted by SIGPIPE"
