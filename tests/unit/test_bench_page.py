"""The figures docs/benchmarks.md gives of the latency gate on a 10-model change are the ones
bench/results.json holds under `latency` (`python -m bench.latency`, in `make bench`). No Docker."""

from __future__ import annotations

import json

from support.stack import ROOT

LATENCY = json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))["latency"]
BENCHMARKS = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())


def test_the_ten_model_changes_test_step_is_the_measured_one_each_way():
    ten = LATENCY["ten_model_change"]
    assert f"| without the gate | {ten['test_without_gate_s']} |" in BENCHMARKS
    assert f"no bound) | {ten['test_default_path_s']} |" in BENCHMARKS
    assert f"0.1) | {ten['test_with_gate_s']} |" in BENCHMARKS
    assert f"The default path adds nothing ({ten['default_path_added_s']} s" in BENCHMARKS
    met = "met" if ten["goal_met"] else "not met"
    assert f"adds {ten['added_s']} s for ten models (goal {ten['goal']:.0f}, {met})" in BENCHMARKS


def test_the_gates_cost_a_model_and_its_power_are_the_measured_ones():
    cost = LATENCY["cost_s"]
    met = "met" if cost["goal_met"] else "not met"
    assert f"{cost['per_model_median']} s a model at the median and {cost['per_model_max']} s at most" in BENCHMARKS
    assert f"(goal {cost['goal']:.0f}, {met})" in BENCHMARKS
    assert LATENCY["false_alarms"]["share_refused"] == 0 and "no A/A trial refused" in BENCHMARKS
    trials = LATENCY["trials"]
    fast, close = LATENCY["detection"]["1.5x"], LATENCY["detection"]["1.2x"]
    assert fast["share_refused"] == 1 and "every 1.5x slower version refused" in BENCHMARKS
    refused, inconclusive = round(close["share_refused"] * trials), round(close["share_inconclusive"] * trials)
    assert (refused, inconclusive) == (trials - 1, 1)  # as the page words it
    assert f"{refused} of {trials} 1.2x slower ones, the twentieth inconclusive" in BENCHMARKS
