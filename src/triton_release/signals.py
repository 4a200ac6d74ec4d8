"""SIGINT and SIGTERM as an exception every `finally` sees, raised once.

GitHub cancels a run with SIGINT, then SIGTERM about 7.5 s later, then SIGKILL: the first signal
stops the work and starts the cleanup, which the second must not break.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

from triton_release.errors import Interrupted

_pending: Interrupted | None = None
_closing = False  # the work is over, the report is being written: a signal now is noted, not raised


def pending_interrupt() -> Interrupted | None:
    """The signal that interrupted this run, for code that caught it (pytest does) to raise again."""
    return _pending


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM (GitHub cancels with SIGINT, then SIGTERM) raise `Interrupted`, so every
    `finally` runs: server containers are removed, staging folders too, the report is written.
    Only the first signal raises: a second one (GitHub's SIGTERM after its SIGINT) must not break
    the cleanup the first one started."""
    global _pending, _closing
    _pending, _closing = None, False

    def handler(number, frame):
        global _pending
        if _pending is not None:
            return  # cleaning up already
        _pending = Interrupted(signal.Signals(number).name, 128 + number)
        if not _closing:
            raise _pending

    try:
        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: leave the process's handlers alone
        yield
        return
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def closing() -> Interrupted | None:
    """The work is over: from now on a signal is noted, not raised. Returns one already noted."""
    global _closing
    _closing = True
    return _pending
