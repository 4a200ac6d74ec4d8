"""Progress of long steps: plain lines throttled by the clock, a live bar on a terminal, the
console choosing between them, each step's tasks inside its log group."""

from __future__ import annotations

import io

import pytest

from support.models import python_model_files
from support.wheels import make_wheel, offline_index
from triton_release import cache, progress
from triton_release.console import Console
from triton_release.image import environments
from triton_release.image.base import PythonInstall
from triton_release.models.repository import Repository
from triton_release.progress import BYTES, LiveBars, PlainLines, describe, size
from triton_release.registry.client import RegistryRepository
from triton_release.registry.publish import _PushStream
from triton_release.session import Session

MiB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def plain():
    lines: list[str] = []
    clock = Clock()
    with progress.reporting(PlainLines(lines.append, every=5.0, clock=clock)):
        yield lines, clock


def test_plain_lines_show_the_first_and_last_and_at_most_one_every_five_seconds(plain):
    lines, clock = plain
    with progress.task("push", total=100 * MiB, unit=BYTES) as bar:
        clock.now += 0.5
        bar.update(1 * MiB)
        for _ in range(32):  # 4 s of updates: within the interval, none shown
            clock.now += 0.125
            bar.advance(MiB // 4)
        assert len(lines) == 1
        clock.now += 1.0  # 5 s after the first line
        bar.update(21 * MiB)
        clock.now += 4.875
        bar.update(30 * MiB)
        clock.now += 0.125
        bar.update(31 * MiB)
        clock.now += 4.5
        bar.update(100 * MiB)
    assert lines == [
        "push: 1.0 MiB of 100.0 MiB",  # the first: no second of it to measure
        "push: 21.0 MiB of 100.0 MiB (4.0 MiB/s)",  # 20 MiB in the 5 s since the line before
        "push: 31.0 MiB of 100.0 MiB (2.0 MiB/s)",
        "push: 100.0 MiB of 100.0 MiB in 15.0 s (6.7 MiB/s)",  # the last: over the whole task
    ]


def test_counts_show_their_unit_and_detail_and_each_task_is_throttled_on_its_own(plain):
    lines, clock = plain
    with (
        progress.task("load", total=3, unit="models ready") as load,
        progress.task("golden cases", total=2, unit="cases") as cases,
    ):
        load.update(detail="wave 1 of 2")
        cases.advance()
        clock.now += 1
        load.advance(2, detail="wave 2 of 2")  # throttled: 1 s after load's first line
        cases.advance()  # throttled too
        clock.now += 5
        load.advance(detail="wave 2 of 2")
    assert lines == [
        "load: 0 of 3 models ready, wave 1 of 2",
        "golden cases: 1 of 2 cases",
        "load: 3 of 3 models ready, wave 2 of 2",
        "golden cases: 2 of 2 cases in 6.0 s",  # the inner task ends first
        "load: 3 of 3 models ready in 6.0 s, wave 2 of 2",
    ]


def test_a_task_that_never_moved_shows_nothing_and_a_stopped_one_says_so(plain):
    lines, clock = plain
    with progress.task("push", unit=BYTES):
        clock.now += 30

    def stopped() -> None:
        with progress.task("push", unit=BYTES) as bar:
            bar.update(3 * MiB, total=8 * MiB, detail="1 of 3 layers done")
            clock.now += 2
            raise RuntimeError("the registry went away")

    with pytest.raises(RuntimeError, match="the registry went away"):
        stopped()
    assert lines == [
        "push: 3.0 MiB of 8.0 MiB, 1 of 3 layers done",
        "push: 3.0 MiB of 8.0 MiB, stopped after 2.0 s (1.5 MiB/s), 1 of 3 layers done",
    ]


def test_outside_a_step_a_task_goes_nowhere():
    with progress.task("requirements", total=2, unit="models") as bar:
        bar.advance(detail="a")
        bar.advance()
    assert bar.done == 2


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (190 * MiB, "190.0 MiB"),
        (5 << 30, "5.0 GiB"),
        (3 << 40, "3072.0 GiB"),
    ],
)
def test_sizes(value, shown):
    assert size(value) == shown


def test_a_line_without_a_total():
    task = progress.Task("push", None, BYTES, progress.Reporter())
    task.update(12 * MiB + MiB // 3)
    assert describe(task, rate=6.5 * MiB) == "push: 12.3 MiB (6.5 MiB/s)"


# -- the console chooses: plain lines in Actions and into files, a live bar on a terminal --------


def test_the_console_shows_plain_lines_in_actions_even_on_a_terminal_and_into_a_file():
    for console in (Console(ci=True, out=Terminal(), err=Terminal()), Console(out=io.StringIO())):
        with console.progress() as reporter:
            assert isinstance(reporter, PlainLines)


def test_in_actions_a_steps_progress_lines_are_inside_its_group():
    out = io.StringIO()
    session = Session("push", Console(ci=True, out=out, err=out), timed=True)

    def push() -> None:
        with progress.task("push", total=2 * MiB, unit=BYTES) as bar:
            bar.update(MiB)
            bar.update(2 * MiB)

    session.step("push", None, push)
    lines = out.getvalue().splitlines()
    assert lines[0] == "::group::push"
    assert lines[1] == "push: 1.0 MiB of 2.0 MiB"
    assert lines[2].startswith("push: 2.0 MiB of 2.0 MiB in 0.0 s")
    assert lines[3:5] == ["::endgroup::"] + [lines[4]] and lines[4].startswith("push: done in")
    assert "push" in session.report.to_json()["steps"]  # the step's time is recorded as before
    assert "seconds" in session.report.to_json()["steps"]["push"]


def test_progress_text_cannot_start_a_workflow_command():
    out = io.StringIO()
    console = Console(ci=True, out=out, err=out)
    with console.progress(), progress.task("requirements", total=1, unit="models") as bar:
        bar.update(detail="x\n::error::forged")
    assert "\n::error::forged" not in out.getvalue()


def test_on_a_terminal_a_live_bar_is_drawn_and_cleared_and_lines_print_above_it(monkeypatch):
    monkeypatch.setattr(LiveBars, "DELAY", 0.0)
    screen = Terminal()
    console = Console(out=screen, err=screen)
    with console.progress() as reporter:
        assert isinstance(reporter, LiveBars)
        with progress.task("push", total=4 * MiB, unit=BYTES) as bar:
            bar.update(MiB, detail="1 of 2 layers done")
            console.line("a line while the bar is up")
            bar.update(4 * MiB)
    drawn = screen.getvalue()
    assert "\r" in drawn and "push:" in drawn and "1 of 2 layers done" in drawn
    assert "\ra line while the bar is up\n" in drawn.replace(" " * 10, "")  # the bar cleared first
    assert drawn.rstrip(" ").endswith("\r")  # cleared at the end: only the step's own lines stay
    assert console._live is None


# -- the push: the daemon's stream, summed over its layers -------------------------------------


def test_the_daemon_push_stream_becomes_bytes_sent_of_the_total(plain):
    lines, clock = plain
    events = [
        {"status": "The push refers to repository [127.0.0.1:5000/team/models]"},
        {"status": "Preparing", "progressDetail": {}, "id": "aaa"},
        {"status": "Preparing", "progressDetail": {}, "id": "bbb"},
        {"status": "Preparing", "progressDetail": {}, "id": "ccc"},
        {"status": "Layer already exists", "progressDetail": {}, "id": "ccc"},
        {"status": "Pushing", "progressDetail": {"current": 512 * 1024, "total": 3 * MiB}, "id": "aaa"},
        {"status": "Pushing", "progressDetail": {"current": MiB, "total": MiB}, "id": "bbb"},
        {"status": "Pushed", "progressDetail": {}, "id": "bbb"},
        {"status": "Pushing", "progressDetail": {"current": 3 * MiB + 1536, "total": 3 * MiB}, "id": "aaa"},
        {"status": "Pushed", "progressDetail": {}, "id": "aaa"},
        {"status": "1.0.0: digest: sha256:" + "d" * 64 + " size: 528"},
        {"progressDetail": {}, "aux": {"Tag": "1.0.0", "Digest": "sha256:" + "d" * 64, "Size": 528}},
    ]
    with progress.task("push", unit=BYTES) as bar:
        stream = _PushStream(RegistryRepository.parse("127.0.0.1:5000/team/models"), "1.0.0", bar)
        for event in events:
            clock.now += 3
            stream.take(event)
    assert (stream.uploaded, stream.mounted, stream.present, stream.digest) == (2, 0, 1, "sha256:" + "d" * 64)
    assert bar.done == bar.total == 4 * MiB  # capped at each layer's size
    assert lines == [
        "push: 512.0 KiB of 3.0 MiB, 1 of 3 layers done",  # the first: once there are bytes to send
        "push: 1.5 MiB of 4.0 MiB (170.7 KiB/s), 2 of 3 layers done",
        "push: 4.0 MiB of 4.0 MiB (426.7 KiB/s), 3 of 3 layers done",
        "push: 4.0 MiB of 4.0 MiB in 36.0 s (113.8 KiB/s), 3 of 3 layers done",
    ]


# -- requirements: models resolved of all, the distributions being unpacked ---------------------


def test_requirements_show_models_resolved_of_all_and_the_distributions_unpacked(make_repo, tmp_path, monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(cache, "_root", tmp_path / "cache")
    make_wheel(tmp_path / "wheels", "shared", "1.0")
    make_wheel(tmp_path / "wheels", "tool", "0.1", requires=("shared",))
    offline_index(monkeypatch, tmp_path / "wheels")
    files = {
        **python_model_files("a"),
        **python_model_files("b"),
        **python_model_files("plain"),
        "a/requirements.txt": "tool==0.1\n",
        "b/requirements.txt": "shared==1.0\n",
    }
    repo = Repository.load(make_repo(files))
    install = PythonInstall(
        "3.11", "/usr/bin/python3.11", "libpython3.11.so.1.0", "", "/usr/lib/python3/dist-packages", ""
    )
    ticking = PlainLines(lines.append, every=5.0, clock=lambda: next(seconds))
    seconds = iter(range(0, 1000, 3))  # each look at the clock: 3 s later
    with progress.reporting(ticking):
        environments.resolve(repo, install, "2.35")
    assert lines == [
        "requirements: 0 of 2 models, a: resolving",
        "requirements: 0 of 2 models, a: unpacking 2 of 2 distributions",  # tool and shared
        "requirements: 1 of 2 models, b: resolving",
        "requirements: 2 of 2 models",
        "requirements: 2 of 2 models in 24.0 s",
    ]
