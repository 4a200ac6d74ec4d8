"""Progress of the long steps: requirements, the build's layers, the push, loading, golden cases.

Domain code reports what it does, never how it is shown, and takes no console argument:

    with progress.task("push", unit="B") as bar:
        bar.update(sent, total=size, detail="layer 2 of 5")

    with progress.task("golden cases", total=len(cases), unit="cases") as bar:
        for case in cases:
            ...
            bar.advance()

The reporter is ambient: the console sets one for each step's duration (`reporting`); outside a
step a task goes nowhere. On a terminal it is a live bar (`LiveBars`). In GitHub Actions, or
with the output going to a file or a pipe, it is plain lines (`PlainLines`): a task's first and
last line always, at most one every few seconds in between, with throughput for bytes:

    push: 12.3 MiB of 190.0 MiB (6.5 MiB/s), layer 2 of 5

Open a task in the step's own thread (the ambient reporter belongs to it); updates may then
come from any thread. This module imports nothing of the project.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol, TextIO

EVERY = 5.0  # seconds between two plain lines of one task, at least
BYTES = "B"  # the unit of sizes: shown as KiB, MiB, GiB, with throughput


class Task:
    """One long piece of work: `done` of `total` (None: not known yet) `unit`s, and a detail
    (what it is doing now: "layer 2 of 5", "wave 1 of 3", a model's name)."""

    def __init__(self, label: str, total: float | None, unit: str, reporter: Reporter) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.done: float = 0
        self.detail = ""
        self._reporter = reporter
        self._lock = threading.Lock()

    def update(self, done: float | None = None, *, total: float | None = None, detail: str | None = None) -> None:
        """Set how much is done (absolute), and the total or the detail when they changed."""
        with self._lock:
            if done is not None:
                self.done = done
            if total is not None:
                self.total = total
            if detail is not None:
                self.detail = detail
            self._reporter.changed(self)

    def advance(self, amount: float = 1, *, detail: str | None = None) -> None:
        """`amount` more done (one model, one case, one layer by default)."""
        with self._lock:
            self.done += amount
            if detail is not None:
                self.detail = detail
            self._reporter.changed(self)


class Reporter:
    """Where tasks go: this base shows nothing (outside a step, and in tests)."""

    def started(self, task: Task) -> None:
        pass

    def changed(self, task: Task) -> None:
        pass

    def finished(self, task: Task, ok: bool) -> None:
        pass

    def close(self) -> None:
        pass


_SILENT = Reporter()
_current: ContextVar[Reporter] = ContextVar("triton_release_progress", default=_SILENT)


@contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Tasks opened in this context, and in code it calls, go to `reporter`."""
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)


@contextmanager
def task(label: str, total: float | None = None, unit: str = "") -> Iterator[Task]:
    """A task of the current step, shown while the block runs. `unit` is a plural noun shown after
    the counts ("models", "layers", "cases"), or `BYTES`."""
    reporter = _current.get()
    found = Task(label, total, unit, reporter)
    reporter.started(found)
    ok = False
    try:
        yield found
        ok = True
    finally:
        reporter.finished(found, ok)


# -- formatting -------------------------------------------------------------------------------


def size(value: float) -> str:
    """Bytes as people read them: 512 B, 12.3 KiB, 190.0 MiB, 2.1 GiB."""
    if value < 1024:
        return f"{value:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def describe(task: Task, rate: float | None = None, seconds: float | None = None, stopped: bool = False) -> str:
    """A task's line: `push: 12.3 MiB of 190.0 MiB (6.5 MiB/s), 2 of 5 layers done`; with
    `seconds`, its last: `push: 190.0 MiB of 190.0 MiB in 29.1 s (6.5 MiB/s), 5 of 5 layers done`."""

    def amount(value: float) -> str:
        return size(value) if task.unit == BYTES else f"{value:.0f}"

    text = f"{task.label}: {amount(task.done)}"
    if task.total is not None:
        text += f" of {amount(task.total)}"
    if task.unit and task.unit != BYTES:
        text += f" {task.unit}"
    if seconds is not None:
        text += f", stopped after {seconds:.1f} s" if stopped else f" in {seconds:.1f} s"
    if rate is not None and task.unit == BYTES:
        text += f" ({size(rate)}/s)"
    if task.detail:
        text += f", {task.detail}"
    return text


# -- plain lines: CI logs, pipes, files --------------------------------------------------------


class PlainLines(Reporter):
    """A line per task when it first moves, then at most one every `every` seconds, and a last one
    when it ends (when it ever moved). Throughput is measured since the line before, and over the
    whole task on the last line."""

    def __init__(
        self, write: Callable[[str], None], every: float = EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.write, self.every, self.clock = write, every, clock
        self._lock = threading.Lock()
        self._start: dict[Task, float] = {}
        self._shown: dict[Task, tuple[float, float]] = {}  # the last line's time and amount done

    def started(self, task: Task) -> None:
        with self._lock:
            self._start[task] = self.clock()

    def changed(self, task: Task) -> None:
        with self._lock:
            now = self.clock()
            last = self._shown.get(task)
            if last is not None and now - last[0] < self.every:
                return
            rate = (task.done - last[1]) / (now - last[0]) if last is not None and now - last[0] >= 1.0 else None
            self._shown[task] = (now, task.done)
        self.write(describe(task, rate))

    def finished(self, task: Task, ok: bool) -> None:
        with self._lock:
            now = self.clock()
            start = self._start.pop(task, now)
            moved = self._shown.pop(task, None) is not None
        if not moved:
            return
        seconds = now - start
        rate = task.done / seconds if seconds >= 1.0 else None
        self.write(describe(task, rate, seconds, stopped=not ok))


# -- a live bar: terminals ---------------------------------------------------------------------


class _Bar(Protocol):
    """What is used of a tqdm bar."""

    total: float | None
    n: float
    start_t: float
    delay: float
    last_print_t: float
    mininterval: float

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None: ...

    def update(self, n: float = 1) -> bool | None: ...

    def refresh(self) -> None: ...

    def clear(self) -> None: ...

    def close(self) -> None: ...


class LiveBars(Reporter):
    """A live bar per task on a terminal (tqdm), cleared when the task ends so that only the
    step's own lines stay; `paused()` clears the bars while another line is printed."""

    DELAY = 0.5  # seconds before a bar appears: quick tasks (a cache hit) never flash

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._bars: dict[Task, _Bar] = {}
        self._lock = threading.RLock()

    def started(self, task: Task) -> None:
        from tqdm import tqdm

        sizes = task.unit == BYTES
        bar = tqdm(
            total=task.total,
            desc=task.label,
            unit=BYTES if sizes else f" {task.unit or 'done'}",
            unit_scale=sizes,
            unit_divisor=1024,
            file=self.stream,
            leave=False,
            dynamic_ncols=True,
            delay=self.DELAY,
            mininterval=0.2,
        )
        with self._lock:
            self._bars[task] = bar

    def changed(self, task: Task) -> None:
        with self._lock:
            bar = self._bars.get(task)
            if bar is None:
                return
            if task.total != bar.total:
                bar.total = task.total
            if task.detail:
                bar.set_postfix_str(task.detail, refresh=False)
            if bar.update(task.done - bar.n):
                return
            now = time.time()  # tqdm's clock
            if now >= bar.start_t + bar.delay and now - bar.last_print_t >= bar.mininterval:
                bar.refresh()  # a new total or detail, nothing more done: shown all the same
                bar.last_print_t = now

    def finished(self, task: Task, ok: bool) -> None:  # noqa: ARG002 (the Display's signature: a bar ends the same either way)
        with self._lock:
            bar = self._bars.pop(task, None)
            if bar is not None:
                bar.close()

    def close(self) -> None:
        with self._lock:
            for bar in self._bars.values():
                bar.close()
            self._bars.clear()

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            shown = [bar for bar in self._bars.values() if _shown(bar)]
            for bar in shown:
                bar.clear()
            try:
                yield
            finally:
                for bar in shown:
                    bar.refresh()


def _shown(bar: _Bar) -> bool:
    """Whether a bar is on the screen yet (it waits `delay` seconds first)."""
    return bar.last_print_t >= bar.start_t + bar.delay
