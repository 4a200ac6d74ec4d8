"""Who runs: this process as another run can find it again, and whether such a process still
lives. A run killed with SIGKILL leaves what it owned (a journal, a server container) for the next
run to finish or remove, once its owner is gone."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Callable


OWNER_LABEL = "triton-release.owner"  # on every container the tool makes: removed once its run is gone


def owner_labels() -> dict[str, str]:
    """The labels that name this process as the owner of a container it makes."""
    return {OWNER_LABEL: json.dumps(owner())}


def owner() -> dict:
    """This process, as another run can tell whether it still lives: its host, pid and start
    time, and whether the host is a container (an action's, which the daemon can be asked about)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": _started(os.getpid()),
            "container": Path("/.dockerenv").exists()}


def _started(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def alive(who: dict, running_elsewhere: Callable[[str], bool] | None = None) -> bool:
    """Whether the process `who` still runs: on this host by its pid and start time; in another
    container (an earlier action's) as `running_elsewhere(host)` says. A process on another host
    that is no container cannot be looked at from here: it counts as alive, and what it owns is
    left alone."""
    if who.get("host") == socket.gethostname():
        pid = who.get("pid")
        return isinstance(pid, int) and _started(pid) != "" and _started(pid) == who.get("started")
    if who.get("container") is True and running_elsewhere is not None:
        return running_elsewhere(str(who.get("host", "")))
    return True
