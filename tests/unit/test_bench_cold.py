"""The cold runner's figures (bench/cold.py): what docs/benchmarks.md and docs/troubleshooting.md
say of them is what bench/results.json holds under `cold_runner`, and the scaling to NVIDIA's
base is the arithmetic the page describes. No Docker: the figures come from `python -m bench.cold`."""

from __future__ import annotations

import json

import pytest

from bench import cold
from support.stack import ROOT

RESULTS = json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))
BENCHMARKS = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
TROUBLESHOOTING = " ".join((ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8").split())

# Each figure the pages give: its path in `cold_runner`, and the text they give it as.
DOCUMENTED = {
    "revision": ("1c941e3", lambda v: v[:7]),
    "base.unpacked_bytes": ("485 MB", lambda v: f"{v / 1e6:.0f} MB"),
    "base.compressed_bytes": ("188 MB", lambda v: f"{v / 1e6:.0f} MB"),
    "example_models": ("5 models", lambda v: f"{v} models"),
    "pull_rate_mb_s": ("51.9 MB/s", lambda v: f"{v} MB/s"),
    "triton_release.total_s": ("15.10", lambda v: f"{v:.2f}"),
    "naive.total_s": ("10.55", lambda v: f"{v:.2f}"),
    "triton_release.pull_waited_s": ("11.00", lambda v: f"{v:.2f}"),
    "triton_release.pull_s": ("11.21 s pull", lambda v: f"{v:.2f} s pull"),
    "naive.steps.pull": ("7.49", lambda v: f"{v:.2f}"),
    "triton_release.steps.environments": ("0.65", lambda v: f"{v:.2f}"),
    "triton_release.steps.build": ("0.60", lambda v: f"{v:.2f}"),
    "naive.steps.build": ("0.54", lambda v: f"{v:.2f}"),
    "triton_release.steps.test": ("1.12", lambda v: f"{v:.2f}"),
    "naive.steps.serve+check": ("2.45", lambda v: f"{v:.2f}"),
    "scaled.pull_s": ("298.7 s", lambda v: f"{v:.1f} s"),
    "scaled.triton_release_s": ("302.6 s", lambda v: f"{v:.1f} s"),
    "scaled.naive_s": ("301.8 s", lambda v: f"{v:.1f} s"),
}


def figure(path: str):
    value = RESULTS["cold_runner"]
    for key in path.split("."):
        value = value[key]
    return value


@pytest.mark.parametrize("path", DOCUMENTED)
def test_each_documented_figure_is_the_measured_one_and_on_the_page(path):
    text, shown = DOCUMENTED[path]
    assert shown(figure(path)) == text, f"cold_runner.{path} is {figure(path)}: docs/benchmarks.md says {text}"
    assert text in BENCHMARKS


def test_the_sums_the_table_gives_are_of_the_measured_steps():
    steps = figure("triton_release.steps")
    before = sum(steps[name] for name in ("validate", "changed", "bump", "export"))
    after = sum(steps[name] for name in ("push", "evidence", "tags", "commit", "tidy"))
    assert f"| validate, changed, bump, export | {before:.2f} |" in BENCHMARKS
    assert f"| push, evidence, tags, commit, tidy | {after:.2f} | {figure('naive.steps.push'):.2f} |" in BENCHMARKS
    share = figure("triton_release.pull_waited_s") / figure("triton_release.total_s")
    naive_share = figure("naive.steps.pull") / figure("naive.total_s")
    assert f"{share:.0%} of the first release here and {naive_share:.0%}" in BENCHMARKS
    beside = figure("triton_release.pull_s") - figure("triton_release.pull_waited_s")
    assert f"{beside:.2f} s of the {figure('triton_release.pull_s'):.2f} s pull" in BENCHMARKS
    big = figure("scaled")
    assert (
        f"{big['pull_s'] / big['triton_release_s']:.0%} and {big['pull_s'] / big['naive_s']:.0%} of them" in BENCHMARKS
    )


def test_the_troubleshooting_page_gives_the_same_scaled_pull():
    assert f"{figure('scaled.pull_s'):.1f} s of {figure('scaled.triton_release_s'):.1f} s" in TROUBLESHOOTING
    assert "benchmarks.md#the-cold-runner" in TROUBLESHOOTING


def test_the_scaled_release_waits_only_for_what_its_steps_before_the_wait_do_not_cover():
    ours = {"total_s": 30.0, "pull_s": 12.0, "pull_waited_s": 10.0}  # 2 s of work beside the pull
    naive = {"total_s": 25.0, "steps": {"pull": 12.0}}
    rate = cold.pull_rate(100, [1.0, 3.0])
    assert rate == 50.0
    big = cold.scaled(ours, naive, cold.NGC_BASE_BYTES / 100)  # a pull of 100 s
    assert big["pull_s"] == 100.0
    assert big["triton_release_s"] == 30.0 - 10.0 + (100.0 - 2.0)
    assert big["naive_s"] == 25.0 - 12.0 + 100.0
