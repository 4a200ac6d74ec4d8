"""SIGINT, SIGTERM and SIGHUP as an exception every `finally` sees, raised once, and never lost.

GitHub cancels a run with SIGINT, then SIGTERM about 7.5 s later, then SIGKILL: the first signal
stops the work and starts the cleanup, which the second must not break. A dropped SSH session
sends SIGHUP: the same stop.

The handler records the signal and raises it where the main thread is. When that is a
`weakref.finalize` callback or a `__del__`, Python reports the exception as unraisable and drops
it; the hook below notes that, and the next `checkpoint()` (every step's start and end, every
polling wait) raises it again, so no signal is ever lost.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from triton_release.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_pending: Interrupted | None = None
_closing = False  # the work is over, the report is being written: a signal now is noted, not raised
_lost = False  # the raise landed where Python drops exceptions: raise it again at a checkpoint
_shields = 0  # inside cleanup that must finish (shielded()): a signal is raised when it ends
_held = False  # a signal came while shielded, not raised yet


def pending_interrupt() -> Interrupted | None:
    """The signal that interrupted this run, for code that caught it (pytest does) to raise again."""
    return _pending


def checkpoint() -> None:
    """Raise the signal again when its first raise was dropped (see the module's docstring)."""
    global _lost
    if _lost and _pending is not None and not _closing:
        _lost = False
        raise _pending


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted`, so every `finally` runs: server containers
    are removed, staging folders too, the report is written. Only the first signal raises: a
    second one (GitHub's SIGTERM after its SIGINT) must not break the cleanup the first one started."""
    global _pending, _closing, _lost, _shields, _held
    _pending, _closing, _lost, _shields, _held = None, False, False, 0, False

    def handler(number: int, _frame: FrameType | None) -> None:
        global _pending, _held
        if _pending is not None:
            return  # cleaning up already
        _pending = Interrupted(signal.Signals(number).name, 128 + number)
        if _shields:
            _held = True
        elif not _closing:
            raise _pending

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        global _lost
        if info.exc_value is not None and info.exc_value is _pending:
            _lost = True  # dropped by a finalizer: the next checkpoint raises it
            return
        previous_hook(info)

    try:
        previous = {s: signal.signal(s, handler) for s in SIGNALS}
    except ValueError:  # not the main thread: leave the process's handlers alone
        yield
        return
    previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for number, old in previous.items():
            # Interrupted, the process is on its way out with the first signal's exit code: the
            # rest of a cancel (GitHub's SIGTERM after its SIGINT), landing while Python shuts
            # down, must not turn it into a kill. A signal that would kill is ignored from here on.
            signal.signal(number, signal.SIG_IGN if _pending is not None and old == signal.SIG_DFL else old)


@contextmanager
def shielded() -> Iterator[None]:
    """Cleanup that a signal must not cut in half (the removal of a container: a raise inside its
    request can leave it behind): a signal during it is raised when it ends."""
    global _shields, _held
    _shields += 1
    try:
        yield
    finally:  # the held signal wins over an error of the cleanup itself (which becomes its __context__)
        _shields -= 1
        if not _shields and _held:
            _held = False
            if _pending is not None and not _closing:
                raise _pending


def closing() -> Interrupted | None:
    """The work is over: from now on a signal is noted, not raised. Returns one already noted."""
    global _closing
    _closing = True
    return _pending
