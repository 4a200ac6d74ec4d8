"""Whose is a container or a journal: a run on this host is looked up by pid and start time; a
process on another host is what the caller says it must assume. And how the process ends."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from triton_release.processes import alive, owner


def test_this_process_is_alive_and_a_dead_pid_on_this_host_is_not():
    me = owner()
    assert alive(me, elsewhere=False)
    assert not alive({**me, "pid": 2**22 + 11}, elsewhere=True)
    assert not alive({**me, "started": "1"}, elsewhere=True)  # a reused pid, or another container's


def test_a_process_on_another_host_is_what_the_caller_must_assume():
    other = {"host": socket.gethostname() + "-other", "pid": 1, "started": "1"}
    assert alive(other, elsewhere=True)  # a server another job on the daemon may be using
    assert not alive(other, elsewhere=False)  # a journal in this checkout: nobody else bumps it


def test_a_process_in_another_pid_namespace_is_never_judged_by_a_pid_of_ours():
    me = owner()
    twin = {**me, "pidns": "pid:[1]", "pid": 2**22 + 11}  # another container with our host name
    assert alive(twin, elsewhere=True) and not alive(twin, elsewhere=False)


EXITING = """
import atexit, sys, tempfile, threading
from pathlib import Path
from triton_release.processes import exit_now
folder = tempfile.TemporaryDirectory(dir=sys.argv[1])  # its finalizer removes it at exit
atexit.register(lambda: (Path(sys.argv[1]) / "atexit ran").write_text("yes"))
print("said before the exit", end="")  # buffered: a pipe
if sys.argv[2] == "thread":
    threading.Thread(target=lambda: (__import__("time").sleep(0.3), print(" and by a thread", end=""))).start()
exit_now(3)
"""


@pytest.mark.parametrize("other", ["alone", "thread"])
def test_exit_now_runs_atexit_and_flushes_and_waits_for_other_threads(tmp_path, other):
    done = subprocess.run(
        [sys.executable, "-c", EXITING, str(tmp_path), other], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3
    assert done.stdout == "said before the exit" + (" and by a thread" if other == "thread" else "")
    assert (tmp_path / "atexit ran").read_text() == "yes"
    assert [p.name for p in tmp_path.iterdir()] == ["atexit ran"]  # the temporary folder removed
