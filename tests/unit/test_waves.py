"""Testing more models than max_loaded in waves: the plan (which models load together, which are
tested where), its report and its lines. Serving the waves is tests/integration/test_golden_waves.py."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ElementTree

import pytest

from triton_release.console import Console
from triton_release.models.inference import CaseResult
from triton_release.models.repository import Repository
from triton_release.models.suite import GoldenRun, Wave, WaveRun, merge_junit, plan_waves

from support.models import ensemble_files, python_model_files, write_tree


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
    with pytest.raises(ValueError):
        plan_waves(repo, ["a"], 0)


def test_the_report_holds_the_waves_and_the_peak_memory():
    case = CaseResult("a/basic", "a/golden/basic.json", True, 1.5, ())
    waves = (WaveRun(1, ("a",), ("a",), 1, 2.5), WaveRun(2, ("b",), ("b",), 0, 1.25))
    run = GoldenRun("img", ("a", "b"), (case,), (), waves, 123456789)
    data = run.to_json()
    assert data["peak_memory_bytes"] == 123456789
    assert data["waves"] == [
        {"index": 1, "loaded": ["a"], "tested": ["a"], "cases": 1, "seconds": 2.5, "oversized": False},
        {"index": 2, "loaded": ["b"], "tested": ["b"], "cases": 0, "seconds": 1.25, "oversized": False}]
    assert GoldenRun("img", (), (), ()).to_json()["peak_memory_bytes"] is None


def test_the_console_prints_one_line_per_wave_only_when_there_are_several():
    case = CaseResult("a/basic", "a/golden/basic.json", True, 1.5, ())
    waves = (WaveRun(1, tuple("abc"), ("a", "b", "c"), 120, 14.24),
             WaveRun(2, ("pipe", "s1", "s2"), ("pipe",), 3, 2.0, True))
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
            'time="0.5"/></testsuite></testsuites>')
    dest = tmp_path / "out" / "golden.xml"
    merge_junit([str(tmp_path / "wave-1.xml"), str(tmp_path / "missing.xml"), str(tmp_path / "wave-2.xml")], str(dest))
    suite = ElementTree.parse(dest).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("time")) == ("2", "1", "1.000")
    assert [c.get("name") for c in suite.iter("testcase")] == ["a/basic", "b/basic"]
