"""The default path: with no latency bound a release measures no latency, wherever perf_analyzer is
installed (the action's image always holds one); `measure_latency` asks for the figures without a
bound. The decision is LatencyOptions.measure, made once from the settings; perf_analyzer_for
honours it before it looks for perf_analyzer at all."""

from __future__ import annotations

import io
import stat

import pytest

from triton_release.action.inputs import ActionInputs
from triton_release.action.summary import _latency_table
from triton_release.cli.main import parser
from triton_release.console import Console
from triton_release.models.gates import GateOptions
from triton_release.models.latency import LatencyOptions, LatencyRun
from triton_release.models.latency import perf_analyzer as pa
from triton_release.models.latency.meter import NOT_ASKED
from triton_release.models.suite import GoldenRun
from triton_release.settings import resolve
from triton_release.steps.golden import perf_analyzer_for


@pytest.fixture
def installed(tmp_path):
    """An environment whose PATH holds a perf_analyzer, as the action's image does."""
    path = tmp_path / "bin" / "perf_analyzer"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\necho 'Perf Analyzer Version 2.51.0'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{path.parent}:/usr/bin:/bin"}


@pytest.mark.parametrize(
    ("given", "measure"),
    [
        ({}, False),  # the default: no bound, nothing asked
        ({"max_latency_increase": "0.2"}, True),  # the gate
        ({"measure_latency": True}, True),  # figures without a bound
        ({"measure_latency": "false"}, False),
        ({"max_latency_increase": "20%", "measure_latency": False}, True),  # a bound always measures
    ],
)
def test_only_a_bound_or_measure_latency_asks_for_a_measurement(tmp_path, installed, given, measure):
    options = GateOptions.from_settings(resolve(given, cwd=tmp_path), installed).latency
    assert options is not None and options.measure is measure


def test_with_no_bound_perf_analyzer_is_not_even_looked_for_though_installed(installed, monkeypatch):
    def looked(*args, **kwargs):
        raise AssertionError("perf_analyzer was looked for on the default path")

    monkeypatch.setattr(pa, "find", looked)
    analyzer, note = perf_analyzer_for(LatencyOptions(measure=False, env=installed), ["a"])
    assert analyzer is None and note == NOT_ASKED
    assert note.startswith("not measured: no max_latency_increase is set") and "measure_latency: true" in note
    # nothing to compare: no note at all, as before
    assert perf_analyzer_for(LatencyOptions(measure=False, env=installed), []) == (None, "")


def test_asked_for_it_is_found_where_it_is_installed(installed):
    analyzer, note = perf_analyzer_for(LatencyOptions(measure=True, env=installed), ["a"])
    assert analyzer is not None and analyzer.version == "2.51.0" and note == ""


def test_measure_latency_is_a_setting_a_flag_an_action_input_and_a_settings_file_key(tmp_path):
    assert resolve({}, cwd=tmp_path).measure_latency is False
    args = parser().parse_args(["release", "--measure-latency"])
    assert getattr(args, "setting.measure_latency") is True
    assert getattr(parser().parse_args(["release"]), "setting.measure_latency") is None
    assert getattr(parser().parse_args(["test", "--image", "x", "--measure-latency"]), "setting.measure_latency")
    inputs = ActionInputs.from_env({"INPUT_MEASURE-LATENCY": "true"})
    assert inputs.settings == {"measure_latency": "true"}
    assert resolve({}, action_inputs=inputs.settings, cwd=tmp_path).measure_latency is True
    (tmp_path / "triton-release.yaml").write_text("measure_latency: true\n")
    assert resolve({}, str(tmp_path / "triton-release.yaml"), cwd=tmp_path).measure_latency is True


def test_not_asked_the_report_console_and_summary_say_not_measured_in_one_line():
    run = LatencyRun(None, 10, 100, None, NOT_ASKED, (), "allow", asked=False)
    report = run.to_json()
    assert report["asked"] is False and report["models"] == [] and report["perf_analyzer"] is None
    assert report["note"].startswith("not measured")
    [blank, line] = _latency_table(run)  # Markdown: the underscores escaped
    assert blank == "" and line.replace("\\_", "_") == f"**Latency**: {NOT_ASKED}"
    out = io.StringIO()
    Console(out=out, err=out).golden_run(GoldenRun("img", ("a",), (), (), latency=run))
    assert f"latency: {NOT_ASKED}" in out.getvalue() and "warning" not in out.getvalue().lower()
    assert LatencyRun(0.2, 10, 100).to_json()["asked"] is True


def test_the_docs_say_what_the_default_measures_and_costs_as_the_code_does():
    from bench.pipeline import DEFAULT_PATH
    from support.stack import ROOT
    from triton_release.settings import BY_KEY

    latency = (ROOT / "docs" / "latency.md").read_text()
    [section] = [s for s in latency.split("\n## ") if s.startswith("The default: no bound, no measuring")]
    quoted = NOT_ASKED.split(" (", 1)[0]
    assert f"`latency: {quoted} (...)`" in section and '`"asked": false`' in section
    assert "measure_latency: true" in section and "0 s" in section
    assert BY_KEY["measure_latency"].default is False and BY_KEY["max_latency_increase"].default is None
    assert "measure_latency: false" in (ROOT / "docs" / "settings.md").read_text()
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    assert "**The default path is the measured path.**" in benchmarks and "`default_path`" in benchmarks
    assert "perf_analyzer present" in DEFAULT_PATH and "no max-latency-increase" in DEFAULT_PATH
