"""Testing more models than max_loaded in waves: the plan (which models load together, which are
tested where), its report and its lines, and the progress of the loads and the cases (models
ready, cases run, with the wave). Serving the waves is tests/integration/test_golden_waves.py."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ElementTree

import pytest

from support.models import ensemble_files, python_model_files, write_tree
from triton_release import progress
from triton_release.console import Console
from triton_release.errors import Refused
from triton_release.models import suite
from triton_release.models.inference import CaseResult
from triton_release.models.repository import Repository
from triton_release.models.suite import (
    GoldenRun,
    Wave,
    WaveRun,
    merge_junit,
    part_beside,
    plan_waves,
    run_waves,
    wave_label,
)
from triton_release.server import model_control
from triton_release.server.model_control import ModelControl, ModelState
from triton_release.server.readiness import ready_among


@pytest.fixture
def repo(tmp_path):
    """Models a..e, steps s1 s2 s3, ensemble pipe (s1, s2), ensemble other (s2, s3), ensemble big (s1 s2 s3)."""
    files: dict = {}
    for name in ("a", "b", "c", "d", "e", "s1", "s2", "s3"):
        files.update(python_model_files(name))
    files.update(ensemble_files("pipe", ["s1", "s2"]))
    files.update(ensemble_files("other", ["s2", "s3"]))
    files.update(ensemble_files("big", ["s1", "s2", "s3"]))
    return Repository.load(write_tree(tmp_path / "model_repository", files))


def loads(waves: list[Wave]) -> list[tuple[str, ...]]:
    return [w.load for w in waves]


def test_everything_that_fits_is_one_wave_of_every_model(repo):
    waves = plan_waves(repo, ["pipe", "a", "b"], 50)
    assert waves == [Wave(1, ("a", "b", "pipe", "s1", "s2"), ("a", "b", "pipe"))]


def test_waves_hold_at_most_max_loaded_models_packed_in_name_order(repo):
    waves = plan_waves(repo, ["e", "d", "c", "b", "a"], 2)
    assert loads(waves) == [("a", "b"), ("c", "d"), ("e",)]
    assert [w.tested for w in waves] == [("a", "b"), ("c", "d"), ("e",)]
    assert [w.index for w in waves] == [1, 2, 3] and not any(w.oversized for w in waves)


def test_an_ensemble_is_loaded_with_its_steps_and_its_steps_are_tested_there(repo):
    waves = plan_waves(repo, ["a", "b", "c", "pipe", "s1", "s2"], 3)
    holding = [w for w in waves if "pipe" in w.load]
    assert len(holding) == 1 and {"pipe", "s1", "s2"} <= set(holding[0].load)
    assert set(holding[0].tested) == {"pipe", "s1", "s2"}  # its steps' own cases run beside it
    assert all(len(w.load) <= 3 for w in waves)
    tested = [name for w in waves for name in w.tested]
    assert sorted(tested) == ["a", "b", "c", "pipe", "s1", "s2"]  # each once


def test_a_later_group_fills_an_earlier_wave_where_it_fits(repo):
    waves = plan_waves(repo, ["a", "pipe", "s3"], 3)
    assert loads(waves) == [("a", "s3"), ("pipe", "s1", "s2")]  # s3 goes back to wave 1, first fit
    assert [w.tested for w in waves] == [("a", "s3"), ("pipe",)]


def test_a_step_two_ensembles_share_is_loaded_with_each_and_tested_once(repo):
    waves = plan_waves(repo, ["other", "pipe", "s2"], 3)
    assert loads(waves) == [("other", "s2", "s3"), ("pipe", "s1", "s2")]
    assert [w.tested for w in waves] == [("other", "s2"), ("pipe",)]


def test_the_plan_is_the_same_whatever_the_order_of_the_names(repo):
    names = ["a", "pipe", "e", "c", "other", "b", "d", "s3"]
    first = plan_waves(repo, names, 3)
    assert plan_waves(repo, list(reversed(names)), 3) == first
    assert plan_waves(repo, sorted(names) + ["a", "pipe"], 3) == first  # a name given twice is tested once
    assert plan_waves(repo, names, 3) == first


def test_max_loaded_one_loads_one_model_at_a_time_and_an_ensemble_with_its_steps(repo):
    waves = plan_waves(repo, ["b", "a", "pipe"], 1)
    assert loads(waves) == [("a",), ("b",), ("pipe", "s1", "s2")]
    assert [w.oversized for w in waves] == [False, False, True]


def test_a_group_bigger_than_max_loaded_is_a_wave_of_its_own(repo):
    waves = plan_waves(repo, ["a", "big", "b", "s1"], 2)
    assert loads(waves) == [("a", "b"), ("big", "s1", "s2", "s3")]
    assert [w.oversized for w in waves] == [False, True]
    assert waves[1].tested == ("big", "s1")  # s1 needs nothing more: tested where big loads it


def test_max_loaded_below_one_is_refused(repo):
    with pytest.raises(ValueError, match="at least 1 model must be loaded"):
        plan_waves(repo, ["a"], 0)


def test_the_report_holds_the_waves_and_the_peak_memory():
    case = CaseResult("a/basic", "a/golden/basic.json", True, 1.5, ())
    waves = (WaveRun(1, ("a",), ("a",), 1, 2.5), WaveRun(2, ("b",), ("b",), 0, 1.25))
    run = GoldenRun("img", ("a", "b"), (case,), (), waves, 123456789)
    data = run.to_json()
    assert data["peak_memory_bytes"] == 123456789
    assert data["waves"] == [
        {"index": 1, "loaded": ["a"], "tested": ["a"], "cases": 1, "seconds": 2.5, "oversized": False},
        {"index": 2, "loaded": ["b"], "tested": ["b"], "cases": 0, "seconds": 1.25, "oversized": False},
    ]
    assert GoldenRun("img", (), (), ()).to_json()["peak_memory_bytes"] is None


def test_the_console_prints_one_line_per_wave_only_when_there_are_several():
    case = CaseResult("a/basic", "a/golden/basic.json", True, 1.5, ())
    waves = (
        WaveRun(1, tuple("abc"), ("a", "b", "c"), 120, 14.24),
        WaveRun(2, ("pipe", "s1", "s2"), ("pipe",), 3, 2.0, True),
    )
    out = io.StringIO()
    Console(out=out).golden_run(GoldenRun("img", (), (case,), (), waves, 300 << 20))
    text = out.getvalue()
    assert "wave 1/2: 3 models loaded, 120 cases, 14.2 s" in text
    assert "wave 2/2: 3 models loaded (more than max_loaded" in text
    assert "server peak memory: 300 MiB" in text
    single = io.StringIO()
    Console(out=single).golden_run(GoldenRun("img", (), (case,), (), waves[:1], None))
    assert "wave" not in single.getvalue() and "peak memory" not in single.getvalue()


def test_the_junit_files_of_the_waves_become_one(tmp_path):
    for index, (name, failures) in enumerate([("a/basic", 0), ("b/basic", 1)], 1):
        (tmp_path / f"wave-{index}.xml").write_text(
            f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
            f'failures="{failures}" skipped="0" tests="1" time="0.5"><testcase classname="" name="{name}" '
            'time="0.5"/></testsuite></testsuites>'
        )
    dest = tmp_path / "out" / "golden.xml"
    merge_junit([str(tmp_path / "wave-1.xml"), str(tmp_path / "missing.xml"), str(tmp_path / "wave-2.xml")], str(dest))
    suite = ElementTree.parse(dest).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("time")) == ("2", "1", "1.000")
    assert [c.get("name") for c in suite.iter("testcase")] == ["a/basic", "b/basic"]


# -- progress: models ready of a wave's, golden cases of all --------------------------------------


@pytest.fixture
def lines():
    """Every progress line (none held back), at a clock that stands still."""
    shown: list[str] = []
    with progress.reporting(progress.PlainLines(shown.append, every=0.0, clock=lambda: 100.0)):
        yield shown


class Control(ModelControl):
    """The models' readiness without a server: `ready[name]`, the round from which it is ready;
    the models in `failing` are loaded on the CPU and fail there."""

    def __init__(self, ready: dict[str, int], failing: tuple[str, ...] = ()) -> None:
        self.ready, self.failing = ready, failing
        self.models: dict = {}
        self.load_timeout, self.image, self.gpu_models = 60, "img", "test"
        self.overrides = {name: "{}" for name in failing}
        self.unloadable: dict[str, str] = {}
        self.paired: dict[str, str] = {}
        self.rounds = 0

    def check_running(self, during: str) -> None:
        self.rounds += 1

    def check_fatal_lines(self) -> None:
        pass

    def model_ready(self, name: str, version) -> bool:
        return name in self.ready and self.rounds >= self.ready[name]

    def index(self) -> list[ModelState]:
        self.indexed = getattr(self, "indexed", 0) + 1
        ready = [  # versions 1 and 2: a model paired serves both
            ModelState(name, v, "READY", "") for name in self.ready if self.model_ready(name, 1) for v in ("1", "2")
        ]
        return ready + [ModelState(name, "1", "UNAVAILABLE", "Internal: no GPU") for name in self.failing]


@pytest.fixture
def no_sleep(monkeypatch):
    monkeypatch.setattr(model_control.time, "sleep", lambda _seconds: None)


def test_loading_shows_models_ready_of_those_loading_with_the_wave(lines, no_sleep):
    control = Control({"a": 1, "b": 2, "c": 2})
    control.wave = "wave 2 of 3"
    control.wait_ready({"a": 1, "b": 1, "c": None})
    assert lines == [
        "load: 0 of 3 models ready, wave 2 of 3",
        "load: 1 of 3 models ready, wave 2 of 3",
        "load: 2 of 3 models ready, wave 2 of 3",
        "load: 3 of 3 models ready, wave 2 of 3",
        "load: 3 of 3 models ready in 0.0 s, wave 2 of 3",
    ]


def test_loading_without_waves_shows_no_wave_and_nothing_to_load_shows_nothing(lines, no_sleep):
    control = Control({"a": 1})
    control.wait_ready({"a": 1})
    assert lines == ["load: 1 of 1 models ready", "load: 1 of 1 models ready in 0.0 s"]
    lines.clear()
    control.wave = "wave 1 of 2"
    control.wait_ready({})  # every model of the wave is overridden: loaded after the start
    assert lines == []


def test_a_model_set_aside_as_needing_a_gpu_is_not_counted_ready(lines, no_sleep):
    control = Control({"a": 1}, failing=("g",))
    control.wait_ready({"a": 1, "g": 1})
    assert control.unloadable == {"g": "no GPU"}
    assert lines[-1] == "load: 1 of 2 models ready in 0.0 s"


def test_each_round_asks_the_index_once_for_every_model_of_the_wave(lines, no_sleep):
    control = Control({name: 3 for name in "abcdefgh"})
    control.wait_ready({name: 1 for name in "abcdefgh"})
    assert control.rounds == 3 and control.indexed == 3  # never one request a model a round


def test_ready_means_ready_at_the_version_waited_for():
    states = [ModelState("a", "1", "READY", ""), ModelState("b", "2", "READY", ""), ModelState("c", "", "", "")]
    pending = {"a": 2, "b": 2, "c": None, "d": None}
    assert ready_among(pending, states) == ["b"]
    assert ready_among({"a": None, "b": None}, states) == ["a", "b"]  # any version
    assert ready_among({"a": None, "b": 2}, states, held={"b"}) == ["a"]  # its paired load has not answered


def test_a_refused_load_stops_the_models_ready(lines, no_sleep):
    control = Control({"a": 1}, failing=("g",))
    control.gpu_models = "require"
    control.logs = lambda: ""
    with pytest.raises(Exception, match="KIND_GPU"):
        control.wait_ready({"a": 1, "g": 1})
    assert lines[-1] == "load: 1 of 2 models ready, stopped after 0.0 s"


class Server:
    """The waves' server without tritonserver: which wave it showed as each switch loaded, and
    the models in `aside` set aside as needing a GPU when they are loaded. `room`: how many models
    of the next wave may load beside the current one's cases; `refuse`: models whose load is refused.
    `most`: the most models ever loaded at once."""

    http_url = grpc_url = "127.0.0.1:1"

    def __init__(self, aside: tuple[str, ...] = (), room: int = 0, refuse: tuple[str, ...] = ()) -> None:
        self.aside, self.room, self.refuse = aside, room, refuse
        self.unloadable: dict[str, str] = {}
        self.loaded: dict[str, int | None] = {}
        self.wave = ""
        self.switched: list[tuple[str, tuple[str, ...]]] = []
        self.beside: list[tuple[str, tuple[str, ...]]] = []  # loads begun beside a wave's cases
        self.asked = 0  # room_for_next_wave
        self.most = 0

    def switch_to(self, models) -> None:
        self.switched.append((self.wave, tuple(sorted(models))))
        for name in set(self.loaded) - set(models):
            del self.loaded[name]
        self._load({name: v for name, v in models.items() if name not in self.loaded})

    def load(self, models, *, sample: bool = True) -> None:
        self.beside.append((self.wave, tuple(sorted(models))))
        self._load(models)

    def _load(self, models) -> None:
        refused = sorted(set(models) & set(self.refuse))
        if refused:
            raise Refused(f"Model {', '.join(refused)} failed to load")
        self.unloadable.update({name: "no GPU" for name in models if name in self.aside})
        self.loaded.update({name: v for name, v in models.items() if name not in self.aside})
        self.most = max(self.most, len(self.loaded))

    def room_for_next_wave(self, loaded: int, wanted: int) -> int:
        self.asked += 1
        assert loaded == len(self.loaded)
        return min(wanted, self.room)

    def read_configs(self, names) -> None:
        pass

    def sample_memory(self, last: bool = False) -> None:
        return None


@pytest.fixture
def cases_run(monkeypatch):
    """run_suite without pytest or a server: each tested model's case (one at most) passes and
    advances the bar."""

    def run_suite(repo, names, http_url, grpc_url, *, junitxml=None, keyword=None, bar=None):
        found = []
        for name in (n for n in names if repo[n].golden_cases):
            found.append(CaseResult(f"{name}/basic", f"{name}/golden/basic.json", True, 1.0, ()))
            bar.advance()
        return found

    monkeypatch.setattr(suite, "run_suite", run_suite)


def test_golden_cases_count_over_every_wave_and_show_the_wave_as_its_loads_do(repo, lines, cases_run):
    waves = plan_waves(repo, ["a", "b", "c", "d", "e"], 2)
    server = Server()
    found, ran = run_waves(repo, server, waves, {name: 1 for name in "abcde"})
    assert len(found) == 5 and [w.cases for w in ran] == [2, 2, 1]
    assert server.switched == [("wave 1 of 3", ("a", "b")), ("wave 2 of 3", ("c", "d")), ("wave 3 of 3", ("e",))]
    assert lines == [
        "golden cases: 0 of 5 cases, wave 1 of 3",
        "golden cases: 1 of 5 cases, wave 1 of 3",
        "golden cases: 2 of 5 cases, wave 1 of 3",
        "golden cases: 2 of 5 cases, wave 2 of 3",
        "golden cases: 3 of 5 cases, wave 2 of 3",
        "golden cases: 4 of 5 cases, wave 2 of 3",
        "golden cases: 4 of 5 cases, wave 3 of 3",
        "golden cases: 5 of 5 cases, wave 3 of 3",
        "golden cases: 5 of 5 cases in 0.0 s, wave 3 of 3",
    ]


def test_one_wave_shows_no_wave_and_a_keyword_leaves_the_total_unknown(repo, lines, cases_run):
    waves = plan_waves(repo, ["a", "pipe"], 50)  # pipe has no golden case: 1 case in all
    server = Server()
    run_waves(repo, server, waves, {name: 1 for name in waves[0].load})
    assert server.wave == "" and lines == ["golden cases: 1 of 1 cases", "golden cases: 1 of 1 cases in 0.0 s"]
    lines.clear()
    run_waves(repo, Server(), waves, {name: 1 for name in waves[0].load}, keyword="basic")
    assert lines == ["golden cases: 1 cases", "golden cases: 1 cases in 0.0 s"]


def test_the_cases_of_a_model_set_aside_as_needing_a_gpu_leave_the_total(repo, lines, cases_run):
    waves = plan_waves(repo, ["a", "b", "c", "d"], 2)
    found, _ = run_waves(repo, Server(aside=("c",)), waves, {name: 1 for name in "abcd"})
    assert [c.case for c in found] == ["a/basic", "b/basic", "d/basic"]
    assert lines == [
        "golden cases: 0 of 4 cases, wave 1 of 2",
        "golden cases: 1 of 4 cases, wave 1 of 2",
        "golden cases: 2 of 4 cases, wave 1 of 2",
        "golden cases: 2 of 4 cases, wave 2 of 2",
        "golden cases: 2 of 3 cases, wave 2 of 2",  # c did not load: its case is not run
        "golden cases: 3 of 3 cases, wave 2 of 2",
        "golden cases: 3 of 3 cases in 0.0 s, wave 2 of 2",
    ]


def test_each_case_pytest_reports_advances_the_cases(lines):
    class Call:
        def __init__(self, when: str) -> None:
            self.when, self.excinfo = when, None

    class Item:
        name, path = "a/basic", "a/golden/basic.json"

    with progress.task("golden cases", total=2, unit="cases") as bar:
        collector = suite._Collector(bar)
        for when in ("setup", "call", "teardown", "call"):  # two cases' calls: only those count
            collector.pytest_runtest_makereport(Item(), Call(when))
    assert len(collector.cases) == 2 and bar.done == 2
    assert lines[-1] == "golden cases: 2 of 2 cases in 0.0 s"


def test_waves_are_shown_only_when_there_are_several():
    assert wave_label(2, 3) == "wave 2 of 3" and wave_label(1, 1) == ""


class Paired(Control):
    """Loads through the repository API without a server: `refuse`, the configs whose load fails."""

    def __init__(self, paired: dict[str, str], refuse: set[str]) -> None:
        super().__init__({name: 1 for name in paired})
        self.paired, self.refuse, self.apart, self.on_cpu = dict(paired), refuse, {}, set()
        self.loaded, self.deferred, self.asked = {}, {}, []

    def _request_load(self, name: str, config: str | None = None) -> str:
        self.asked.append((name, config))
        return "Internal: version 1 failed: No module named 'torch'" if config in self.refuse else ""

    def sample_memory(self, last: bool = False) -> None:
        pass


def test_a_model_whose_previous_version_fails_beside_the_new_one_is_loaded_alone_and_set_apart(lines, no_sleep):
    control = Paired({"a": "pair-a", "b": "pair-b"}, refuse={"pair-b"})
    control.load({"a": 2, "b": 2})
    assert [c for n, c in control.asked if n == "a"] == ["pair-a"]
    assert [c for n, c in control.asked if n == "b"] == ["pair-b", None]  # beside, then alone
    assert control.apart == {"b": "version 1 failed: No module named 'torch'"}
    assert control.loaded == {"a": 2, "b": 2}
    control.asked.clear()
    control.loaded.pop("b")
    control.load({"b": 2})  # a later wave: not paired again
    assert control.asked == [("b", None)]


def test_the_golden_run_collects_only_the_wave_s_folders(tmp_path):
    """A model outside the wave holds a Python file pytest could not even collect: walking its
    folder would stop the run. Nothing listens on port 9, so each case of the wave fails at once."""
    files = {**python_model_files("a"), **python_model_files("b"), "b/1/test_broken.py": "def (:\n"}
    files = {k: v for k, v in files.items() if k != "b/golden/basic.json"}
    files.update(python_model_files("c"))
    repo = Repository.load(write_tree(tmp_path / "model_repository", files))
    found = suite.run_suite(repo, ["a", "c"], "127.0.0.1:9", "127.0.0.1:9")
    assert sorted(c.case for c in found) == ["a/basic", "c/basic"]
    junit = tmp_path / "none.xml"
    assert suite.run_suite(repo, ["b"], "127.0.0.1:9", "127.0.0.1:9", junitxml=str(junit)) == []  # no case, no pytest
    assert ElementTree.parse(junit).getroot().tag == "testsuites"


def test_the_golden_run_s_pytest_captures_sys_only(tmp_path, monkeypatch):
    repo = Repository.load(write_tree(tmp_path / "model_repository", python_model_files("a")))
    given: list[list[str]] = []
    monkeypatch.setattr(pytest, "main", lambda args, **_: given.append(args) or pytest.ExitCode.OK)
    suite.run_suite(repo, ["a"], "127.0.0.1:9", "127.0.0.1:9")
    assert "--capture=sys" in given[0]
    assert str(repo.root.resolve()) not in given[0][:1]  # the wave's golden folder, never the root


def test_the_next_wave_loads_beside_the_cases_of_the_current_one_where_there_is_room(repo, lines, cases_run):
    waves = plan_waves(repo, ["a", "b", "c", "d", "e"], 2)
    server = Server(room=9)
    server.loaded = {"a": 1, "b": 1}  # the start loaded wave 1
    found, ran = run_waves(repo, server, waves, {name: 1 for name in "abcde"})
    assert sorted(c.case for c in found) == [f"{m}/basic" for m in "abcde"] and [w.cases for w in ran] == [2, 2, 1]
    assert server.beside == [("wave 2 of 3", ("c", "d")), ("wave 3 of 3", ("e",))]  # shown as their own waves
    assert server.switched == [("wave 1 of 3", ("a", "b")), ("wave 2 of 3", ("c", "d")), ("wave 3 of 3", ("e",))]
    assert server.asked == 2  # before each wave that has one after it
    assert server.most == 4 and server.loaded == {"e": 1}  # two waves at most, the one before unloaded
    assert lines[-1] == "golden cases: 5 of 5 cases in 0.0 s, wave 3 of 3"


def test_without_room_and_with_drift_the_waves_load_one_after_the_other(repo, lines, cases_run):
    waves = plan_waves(repo, ["a", "b", "c", "d", "e"], 2)
    server = Server(room=0)
    run_waves(repo, server, waves, {name: 1 for name in "abcde"})
    assert server.beside == [] and server.asked == 2 and server.most == 2
    measured = Server(room=9)  # drift and latency measure a wave alone: no one asks for room
    run_waves(repo, measured, waves, {name: 1 for name in "abcde"}, after_wave=lambda _tested, _found: None)
    assert measured.beside == [] and measured.asked == 0 and measured.most == 2


def test_the_next_wave_s_models_beyond_the_room_load_after_the_cases(repo, lines, cases_run):
    waves = plan_waves(repo, ["a", "b", "c", "d", "e"], 2)
    server = Server(room=1)
    found, _ = run_waves(repo, server, waves, {name: 1 for name in "abcde"})
    assert len(found) == 5 and server.beside == [("wave 2 of 3", ("c",)), ("wave 3 of 3", ("e",))]
    assert server.switched[1] == ("wave 2 of 3", ("c", "d")) and server.most == 3  # d loaded at the switch


def test_a_load_refused_beside_the_cases_stops_the_run_before_the_next_wave_s_cases(repo, lines, cases_run):
    waves = plan_waves(repo, ["a", "b", "c", "d"], 2)
    server = Server(room=9, refuse=("c",))
    with pytest.raises(Refused, match="Model c failed to load"):
        run_waves(repo, server, waves, {name: 1 for name in "abcd"})
    assert server.beside == [("wave 2 of 2", ("c", "d"))] and len(server.switched) == 1
    assert lines[-1] == "golden cases: 2 of 4 cases, stopped after 0.0 s, wave 2 of 2"  # none of wave 2 ran


def test_a_part_of_the_next_wave_beside_the_cases_holds_whole_groups_in_name_order(repo):
    ahead = dict.fromkeys(["a", "big", "pipe", "s1", "s2", "s3"], 1)
    assert part_beside(repo, ahead, 6) == ahead
    assert list(part_beside(repo, ahead, 4)) == ["a", "pipe", "s1", "s2"]  # big needs s1 s2 s3: 5 in all
    assert list(part_beside(repo, ahead, 3)) == ["a", "s1", "s2"]
    assert part_beside(repo, {"pipe": 1, "s1": 1}, 1) == {"s1": 1}  # pipe needs s1, not loaded yet: never alone
    assert part_beside(repo, ahead, 0) == {}
