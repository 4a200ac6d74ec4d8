"""Whose is a container or a journal: a run on this host is looked up by pid and start time; a
process on another host is what the caller says it must assume."""

from __future__ import annotations

import socket

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
