"""The benchmark's step-by-step figures and plot (bench/pipeline.py, bench/report.py), from made-up
reports and figures: the test step split into its report's phases with what they leave of it, the
command's time outside its steps, medians per step, the table, and a plot drawn with and without
the step and latency figures. No Docker: the figures themselves come from `make bench`."""

from __future__ import annotations

import json
import time

import pytest

from bench import pipeline, report

REPORT = {
    "steps": {
        "validate": {"seconds": 0.25, "ok": True},
        "build": {"seconds": 0.5, "ok": True},
        "test": {"seconds": 4.0, "ok": True, "phases": {"server_start": 1.0, "load": 1.5, "golden_cases": 0.5}},
        "push": {"seconds": 0.25, "ok": True},
    }
}


def test_the_test_step_is_split_into_its_phases_and_the_rest_of_the_command_is_named():
    steps = pipeline.release_steps(REPORT, elapsed=5.5)
    assert steps == {
        "validate": 0.25,
        "build": 0.5,
        "test: server_start": 1.0,
        "test: load": 1.5,
        "test: golden_cases": 0.5,
        "test: other": 1.0,
        "push": 0.25,
        pipeline.OUTSIDE: 0.5,
    }
    assert sum(steps.values()) == 5.5


def test_a_report_without_phases_keeps_the_test_step_whole():
    plain = {"steps": {"test": {"seconds": 4.0, "ok": True}, "not a step": 3}}
    assert pipeline.release_steps(plain, elapsed=4.5) == {"test": 4.0, pipeline.OUTSIDE: 0.5}


def test_each_step_is_the_median_of_its_runs():
    runs = [{"build": 1.0, "push": 3.0}, {"build": 2.0, "push": 1.0}, {"build": 9.0, "push": 2.0, "late": 1.0}]
    assert pipeline.median_steps(runs) == {"build": 2.0, "push": 2.0, "late": 0.0}


def figures(with_steps: bool, with_latency: bool) -> dict:
    results: dict = {
        "machine": "test",
        "date": "2026-12-03",
        "revision": "0" * 40,
        "n_models": 20,
        "release_s": {"triton_release": 5.5, "naive": 14.0, "ratio": 0.39},
        "scaling": {"validate_s": {}, "changed_s": {}},
    }
    if with_steps:
        results["release_s"]["steps"] = {
            "triton_release": pipeline.release_steps(REPORT, 5.5),
            "naive": {"build": 5.0, "serve+check": 7.5, "push": 1.5},
        }
    if with_latency:
        share = {"share_refused": 0.5, "share_inconclusive": 0.1}
        results["latency"] = {
            "revision": "0" * 40,
            "trials": 20,
            "bound": 0.1,
            "scenarios": {"aa": share, "slow12": share, "slow15": share},
            "cost_s": {"per_model_median": 6.0, "per_model_max": 8.0, "goal": 6.0},
            "ten_model_change": {"models": 10, "added_s": 40.0},
        }
    return results


def test_the_table_gives_ours_step_by_step_beside_the_naive_phases():
    rows = report.steps_table(figures(True, False)["release_s"])
    assert "| test: load | 1.50 |  |" in rows and "| serve+check |  | 7.50 |" in rows
    assert "| build | 0.50 | 5.00 |" in rows and "| push | 0.25 | 1.50 |" in rows
    assert rows[-1] == "| **total** (median) | **5.50** | **14.00** |"


@pytest.mark.parametrize(("with_steps", "with_latency"), [(True, True), (False, False)])
def test_the_plot_is_drawn_with_the_figures_a_file_has(tmp_path, with_steps, with_latency):
    out = tmp_path / "results.png"
    report.plot(figures(with_steps, with_latency), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_python_m_bench_report_draws_the_plot_again_from_a_file(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(figures(True, True)))
    assert report.main(["--json", str(tmp_path / "results.json"), "--plot", str(tmp_path / "out.png")]) == 0
    assert (tmp_path / "out.png").is_file()


def test_the_run_records_its_minutes_revision_and_the_sections_measured_at_it(tmp_path):
    figures = {"revision": "abc", "latency": {"revision": "abc"}, "fanout": {"revision": "old"}, "models": 20}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(figures))
    started = time.time() - 90
    assert report.main(["--json", str(path), "--plot", str(tmp_path / "r.png"), "--started", str(started)]) == 0
    run = json.loads(path.read_text())["make_bench"]
    assert run == {"minutes": 1.5, "revision": "abc", "sections": ["latency"]}


def test_the_tools_modules_are_compiled_before_releases_are_measured():
    """As pip installs them into the action's image; a machine with PYTHONDONTWRITEBYTECODE set
    would otherwise compile them at every release's start."""
    import importlib
    import importlib.util
    from pathlib import Path

    source = importlib.import_module("triton_release.cli.main").__file__
    pipeline.compiled.cache_clear()
    pipeline.compiled()
    assert Path(importlib.util.cache_from_source(source)).stat().st_mtime >= Path(source).stat().st_mtime
