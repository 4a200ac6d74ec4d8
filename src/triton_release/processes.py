"""Who runs: this process as another run can find it again, and whether such a process still
lives. A run killed with SIGKILL leaves what it owned (a journal, a server container) for the next
run to finish or remove, once its owner is gone. And how this process ends (exit_now)."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from triton_release.contract import OWNER_LABEL
from triton_release.signals import pending_interrupt, shielded

if TYPE_CHECKING:
    import docker

log = logging.getLogger("triton_release")


def exit_now(code: int) -> NoReturn:
    """End the process with `code` once a command is done, without the interpreter's teardown: the
    freeing of every module (tritonclient, grpc, numpy, docker) took a quarter of a second of a
    one-model release. What an exit must do is done first: atexit's functions (the cache's save,
    temporary folders' finalizers), then the streams flushed. Another non-daemon thread still
    running: the usual exit, which waits for it."""
    wait_removed()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # started with that descriptor closed (`>&-`): nothing was written there
            continue
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say there
            stream.flush()
    os._exit(code)


def script(main: Callable[[], int]) -> Callable[[], NoReturn]:
    """A console script of `main`: it runs, then exit_now with what it returned."""

    def run() -> NoReturn:
        exit_now(main())

    return run


def owner_labels() -> dict[str, str]:
    """The labels that name this process as the owner of a container it makes."""
    return {OWNER_LABEL: json.dumps(owner())}


def owner() -> dict:
    """This process, as another run can tell whether it still lives: its host, its pid namespace
    (containers on one daemon may share a host name, never a pid namespace), pid and start time."""
    return {
        "host": socket.gethostname(),
        "pidns": _pid_namespace(),
        "pid": os.getpid(),
        "started": _started(os.getpid()),
    }


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _started(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def alive(who: dict, *, elsewhere: bool) -> bool:
    """Whether the process `who` may still run. On this host, in this pid namespace, it is looked
    up by pid and start time. A process elsewhere (another host, another container) cannot be
    looked at from here: `elsewhere` says what to assume (True for a
    container on a shared daemon, which another job may be using; False for a journal in this
    checkout, which no other host bumps while this run does)."""
    if who.get("host") == socket.gethostname() and who.get("pidns") == _pid_namespace() != "":
        pid = who.get("pid")
        return isinstance(pid, int) and _started(pid) != "" and _started(pid) == who.get("started")
    return elsewhere


SETTLE_SECONDS = 5.0  # how long a create that a signal cut short may take to finish on the daemon


def remove_by_name(client: docker.DockerClient, name: str, *, created: bool = True) -> None:
    """Remove the container `name` (a docker client's) if it exists: a container made under a name
    chosen before its create is removed even when a signal came during the create. `created`:
    whether the create returned; when a signal cut it short, the daemon may still be making the
    container, so a missing one is looked for again for a few seconds. A signal during the removal
    waits for it to finish. A failure here is a warning, never the error reported."""
    settle = not created and pending_interrupt() is not None
    with shielded():
        _remove(client, name, settle)


def _remove(client: docker.DockerClient, name: str, settle: bool) -> None:
    import docker

    deadline = time.monotonic() + (SETTLE_SECONDS if settle else 0.0)
    while True:
        try:
            client.api.remove_container(name, force=True)
            return
        except docker.errors.NotFound:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.2)
        except docker.errors.APIError as exc:
            if settle and time.monotonic() < deadline:  # still being created: "removal already in progress"
                time.sleep(0.2)
                continue
            log.warning(
                f"could not remove the container {name} ({exc.explanation or exc}); remove it with "
                f"`docker rm -f {name}`"
            )
            return


_removing: list[threading.Thread] = []  # remove_beside's removals not yet waited for


def remove_beside(client: docker.DockerClient, name: str, *, created: bool = True) -> None:
    """remove_by_name in a thread, while the caller goes on (a server's removal: a fifth of a second);
    wait_removed waits for it, and so does the process's end (it is not a daemon thread). No signal
    reaches that thread, so no shield is needed there."""
    settle = not created and pending_interrupt() is not None

    def remove() -> None:
        try:
            _remove(client, name, settle)
        except Exception as exc:  # the daemon gone: said, as remove_by_name's caller would say it
            log.warning(f"could not remove the container {name} ({exc}); remove it with `docker rm -f {name}`")

    thread = threading.Thread(target=remove, name=f"remove {name}")
    thread.start()
    _removing.append(thread)


def wait_removed() -> None:
    """Wait for every removal remove_beside started."""
    while _removing:
        _removing[0].join()
        _removing.pop(0)
