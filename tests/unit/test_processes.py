"""Whose is a container or a journal: a run on this host is looked up by pid and start time, an
action container's by asking the daemon, and a process elsewhere is never judged gone."""

from __future__ import annotations

import os
import socket

from triton_release.processes import alive, owner


def test_this_process_is_alive_and_a_dead_pid_on_this_host_is_not():
    me = owner()
    assert alive(me)
    assert not alive({**me, "pid": 2 ** 22 + 11})
    assert not alive({**me, "started": "1"})  # a reused pid: another start time


def test_an_owner_in_another_container_is_what_the_daemon_says():
    other = {"host": "0123456789ab", "pid": os.getpid(), "started": "1", "container": True}
    assert alive(other, lambda host: True)
    assert not alive(other, lambda host: False)


def test_a_process_on_another_host_that_is_no_container_is_left_alone():
    elsewhere = {"host": socket.gethostname() + "-other", "pid": 1, "started": "1", "container": False}
    assert alive(elsewhere, lambda host: False)
    assert alive({"host": "x"}, None)
