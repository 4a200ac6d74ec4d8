"""Signals are never lost: SIGHUP stops a run as SIGTERM does, a signal whose raise Python dropped
(it landed in a finalizer) is raised again at the next checkpoint, and a closed stdout is an
ordinary stop, not a bug."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import weakref

import pytest

from support.models import golden_case, python_model_files, write_tree
from support.reports import read_report
from triton_release.console import Console
from triton_release.models.repository import Repository
from triton_release.models.suite import run_suite
from triton_release.session import Session, run


class _Closed(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise io.UnsupportedOperation("no file")


def one_step(report, name: str, work, *args) -> int:
    """A `release` session of one step `name` doing `work(*args)`, its output unread: the exit code,
    the report written to `report`."""
    session = Session("release", Console(out=io.StringIO(), err=io.StringIO()))
    return run(session, lambda s: s.step(name, None, work, *args), report_path=str(report))


def test_sighup_stops_the_run_as_sigterm_does(tmp_path):
    cleaned = []

    def serve():
        try:
            os.kill(os.getpid(), signal.SIGHUP)
        finally:
            cleaned.append("container removed")

    assert one_step(tmp_path / "r.json", "test", serve) == 129
    assert cleaned == ["container removed"]
    assert read_report(tmp_path / "r.json")["error"]["message"] == "interrupted by SIGHUP"


CANCELLED = """
import io, os, signal, sys
from triton_release.console import Console
from triton_release.models.repository import Repository
from triton_release.models.suite import run_suite
from triton_release.session import Session, run

session = Session("release", Console(out=io.StringIO(), err=io.StringIO()))
code = run(session, lambda s: os.kill(os.getpid(), signal.SIGINT), report_path=sys.argv[1])
os.kill(os.getpid(), signal.SIGTERM)  # the rest of GitHub's cancel, as the process exits
sys.exit(code)
"""


def test_the_sigterm_after_a_sigint_does_not_kill_the_process_on_its_way_out(tmp_path):
    """GitHub cancels with SIGINT, then SIGTERM: when the second lands after the run's cleanup, as
    the process exits, the exit code stays the first signal's (it was a kill, -15, once)."""
    done = subprocess.run([sys.executable, "-c", CANCELLED, str(tmp_path / "r.json")], capture_output=True, text=True)
    assert done.returncode == 130, done.stderr
    assert read_report(tmp_path / "r.json")["error"]["message"] == "interrupted by SIGINT"


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
    assert read_report(tmp_path / "r.json")["steps"]["build"]["ok"] is False


class _Bumped:
    written = True

    def to_json(self) -> dict:
        return {}


def test_a_signal_dropped_after_the_last_step_exits_143_and_says_the_work_was_done(tmp_path):
    """No checkpoint follows to raise it: the run's work is done, and the exit code and the console
    say it was interrupted as it ended."""
    err = io.StringIO()
    session = Session("release", Console(out=io.StringIO(), err=err))

    class Resource:
        pass

    def body(s):
        s.step("push", None, lambda: None)
        resource = Resource()
        weakref.finalize(resource, lambda: (os.kill(os.getpid(), signal.SIGTERM), sum(range(10_000))))
        del resource

    assert run(session, body, report_path=str(tmp_path / "r.json")) == 143
    assert "interrupted by SIGTERM as the run ended: its work was done" in err.getvalue()
    assert read_report(tmp_path / "r.json")["steps"]["push"]["ok"] is True


def test_a_closed_stdout_drops_what_follows_and_the_run_goes_on(tmp_path):
    """`release | grep -m1 "changed: done"`: the reader goes away while the bump is shown. Nothing is
    raised where the line is printed (that raise lost the bump's result, so its undo never ran):
    the run goes on to its end, its output dropped, its report written."""
    ran = []
    session = Session("release", Console(out=_Closed(), err=_Closed()))

    def body(s):
        bumped = s.step("bump", lambda _result: s.console.line("a/2: new version folder"), _Bumped)
        ran.append(bumped.written)  # the release sets `bumped` from here: its undo depends on it
        s.step("test", None, lambda: s.console.line("golden cases: 1 of 1 passed"))
        s.console.failure("a failure message goes nowhere too")
        ran.append("tested")

    assert run(session, body, report_path=str(tmp_path / "r.json"), json_out=True) == 0
    assert ran == [True, "tested"]
    report = read_report(tmp_path / "r.json")
    assert report["ok"] is True and report["error"] is None


def test_a_signal_during_a_container_removal_waits_for_it_then_stops_the_run(tmp_path):
    """The removal of a probe (processes.remove_by_name) is shielded: the signal that lands inside its
    request is raised once the container is gone, never in the middle, which would leave it behind."""
    from triton_release.processes import remove_by_name

    removed = []

    class Api:
        def __init__(self):
            self.calls = 0

        def remove_container(self, name, force):
            self.calls += 1
            if self.calls == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # the signal lands inside the request
            removed.append(name)

    class Client:
        api = Api()

    assert one_step(tmp_path / "r.json", "build", remove_by_name, Client(), "probe-1") == 143
    assert removed == ["probe-1"]


def test_a_create_cut_short_by_a_signal_is_looked_for_until_the_daemon_has_made_it(tmp_path, monkeypatch):
    """SIGTERM while `containers.create` waits for the daemon: the container does not exist yet when
    the cleanup first looks; it is removed once it appears, not left behind."""
    import docker

    from triton_release import processes

    monkeypatch.setattr(processes, "SETTLE_SECONDS", 3.0)
    seen = []

    class Api:
        def remove_container(self, name, force):
            seen.append(name)
            if len(seen) < 3:  # the daemon is still making it
                raise docker.errors.NotFound("no such container")

    class Client:
        api = Api()

    def probe():
        created = False
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # during the create: it never returned
            created = True
        finally:
            processes.remove_by_name(Client(), "probe-2", created=created)

    assert one_step(tmp_path / "r.json", "build", probe) == 143
    assert seen == ["probe-2"] * 3


def test_a_signal_held_while_the_removal_itself_fails_is_raised_not_lost(tmp_path):
    """The daemon times out the removal (requests' ConnectionError, not a docker error) while a
    SIGINT is held: the run stops as interrupted (130), and a later run in this process holds
    nothing over from it."""
    import requests

    from triton_release.processes import remove_by_name

    class Api:
        def remove_container(self, name, force):
            os.kill(os.getpid(), signal.SIGINT)
            raise requests.ConnectionError("the daemon timed out")

    class Client:
        api = Api()

    assert one_step(tmp_path / "r.json", "test", remove_by_name, Client(), "probe-3") == 130
    cleaned = []

    def serve():
        try:
            pass
        finally:
            cleaned.append("done")

    assert one_step(tmp_path / "r2.json", "test", serve) == 0
    assert cleaned == ["done"]


WAITING_ON_HTTP = """
import os, signal, socket, sys, threading
from pathlib import Path
from triton_release.errors import Interrupted
from triton_release.models import golden
from triton_release.models.inference import ask
from triton_release.signals import signals_as_interrupts

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()  # connections are taken, never answered: the client waits inside gevent's hub
url = f"127.0.0.1:{listener.getsockname()[1]}"
case, problems = golden.load_case(Path(sys.argv[1]), "m")
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
with signals_as_interrupts():
    try:
        ask(case, url, url)
    except Interrupted as stop:
        print("stopped by", stop)
"""


def test_a_signal_while_the_http_client_waits_stops_it_without_a_traceback(tmp_path):
    """The HTTP client waits in gevent's hub, where the signal's raise lands: the waiting call is
    stopped, and gevent does not print the interrupt as its own error first."""
    path = write_tree(tmp_path, {"m/golden/case.json": golden_case()}) / "m" / "golden" / "case.json"
    done = subprocess.run(
        [sys.executable, "-c", WAITING_ON_HTTP, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "stopped by SIGTERM", done.stdout + done.stderr
    assert done.stderr == "", done.stderr


def test_a_signal_dropped_in_a_finalizer_during_the_golden_run_stops_it(tmp_path):
    """pytest sets its own unraisable hook while it runs the golden cases, so a signal whose raise
    landed in a finalizer there is taken by pytest, not noted for the next checkpoint: the golden
    run raises it when pytest returns, as it raises one pytest caught."""
    repo = Repository.load(write_tree(tmp_path / "model_repository", python_model_files("m")))

    class Resource:
        pass

    class Bar:  # advanced as each case ends: the signal lands in a finalizer just then
        def advance(self, amount: float = 1) -> None:
            resource = Resource()
            weakref.finalize(resource, lambda: (os.kill(os.getpid(), signal.SIGTERM), sum(range(10_000))))
            del resource

    def body(s):
        # nothing listens on port 9: the case fails at once, and is counted
        s.step("test", None, lambda: run_suite(repo, ["m"], "127.0.0.1:9", "127.0.0.1:9", bar=Bar()))
        s.step("push", None, lambda: pytest.fail("pushed after a signal"))

    session = Session("release", Console(out=io.StringIO(), err=io.StringIO()))
    assert run(session, body, report_path=str(tmp_path / "r.json")) == 143
    assert read_report(tmp_path / "r.json")["steps"]["test"]["ok"] is False
