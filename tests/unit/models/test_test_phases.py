"""Where the test step's time goes (models/suite.py's Phases, PHASES): each phase's seconds summed
over the waves, in the order a run passes them; a finer split moved out of a phase never takes
more than it holds; the report's `phases`; and the waves' loads, cases and memory reads timed as
run_waves passes them. The steps' own phases (the server's start and stop, drift, latency) are
timed around the server in steps/golden.py, on the stack (tests/integration/test_bench_smoke.py
reads them through the bench)."""

from __future__ import annotations

import pytest

from support.models import python_model_files, write_tree
from triton_release.models import suite
from triton_release.models.inference import CaseResult
from triton_release.models.repository import Repository
from triton_release.models.suite import PHASES, GoldenRun, Phases, plan_waves, run_waves


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    made = Clock()
    monkeypatch.setattr(suite.time, "monotonic", made)
    return made


def test_phases_sum_each_name_and_keep_the_order_of_the_run(clock):
    phases = Phases()
    for name, seconds in (("golden_cases", 1.0), ("load", 2.0), ("golden_cases", 0.5)):
        with phases.timed(name):
            clock.now += seconds
    phases.add("prepare", 0.25)
    assert phases.frozen() == (("prepare", 0.25), ("load", 2.0), ("golden_cases", 1.5))
    assert [name for name, _ in phases.frozen()] == [n for n in PHASES if n in phases.seconds]


def test_a_finer_split_moves_at_most_what_the_phase_holds():
    phases = Phases()
    phases.add("server_start", 3.0)
    phases.move("server_start", "load", 1.25)
    assert dict(phases.frozen()) == {"server_start": 1.75, "load": 1.25}
    phases.move("server_start", "load", 10.0)  # a log's span longer than the start: all of it, no less than 0
    assert dict(phases.frozen()) == {"server_start": 0.0, "load": 3.0}


def test_the_report_gives_the_phases_by_name():
    run = GoldenRun("img", (), (), (), phases=(("server_start", 1.23456), ("golden_cases", 0.5)))
    assert run.to_json()["phases"] == {"server_start": 1.235, "golden_cases": 0.5}
    assert GoldenRun("img", (), (), ()).to_json()["phases"] == {}


class SlowServer:
    """A server whose loads take 2 s and memory reads 0.5 s of `clock`."""

    http_url = grpc_url = "127.0.0.1:1"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.unloadable: dict[str, str] = {}
        self.wave = ""

    def switch_to(self, models) -> None:
        self.clock.now += 2.0

    def read_configs(self, names) -> None:
        pass

    def sample_memory(self, last: bool = False) -> None:
        self.clock.now += 0.5


def test_the_waves_time_their_loads_cases_and_memory_reads(tmp_path, monkeypatch, clock):
    files: dict = {}
    for name in ("a", "b", "c"):
        files.update(python_model_files(name))
    repo = Repository.load(write_tree(tmp_path / "model_repository", files))

    def run_suite(repo, names, http_url, grpc_url, *, junitxml=None, keyword=None, bar=None):
        clock.now += 3.0
        return [CaseResult(f"{name}/basic", f"{name}/golden/basic.json", True, 1.0, ()) for name in names]

    monkeypatch.setattr(suite, "run_suite", run_suite)
    phases = Phases()
    after: list[list[str]] = []
    run_waves(
        repo,
        SlowServer(clock),
        plan_waves(repo, ["a", "b", "c"], 2),
        dict.fromkeys("abc", 1),
        after_wave=lambda tested, _found: after.append(tested),
        phases=phases,
    )
    assert after == [["a", "b"], ["c"]]
    assert dict(phases.frozen()) == {"load": 4.0, "golden_cases": 6.0, "memory": 1.0}  # two waves
