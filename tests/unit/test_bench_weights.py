"""The new-weights benchmark's figures (bench/weights.py): its goals read off one size's
measurements, and its table. No Docker: the figures come from `python -m bench.weights`."""

from __future__ import annotations

import json

import pytest

from bench import weights
from support.stack import ROOT

MIB = weights.MIB


def test_the_goals_are_read_against_naive_the_floor_and_the_peak():
    met = weights.ratios(release_s=6.0, naive_s=30.0, floor_s=5.0, peak=200 * MIB)
    assert met["release_over_naive"] == 0.2 and met["release_over_floor"] == 1.2
    assert met["met"] == {"naive": True, "floor": True, "peak_memory": True}
    missed = weights.ratios(release_s=19.3, naive_s=33.7, floor_s=5.0, peak=2048 * MIB)
    assert missed["release_over_naive"] == 0.573
    assert missed["met"] == {"naive": False, "floor": False, "peak_memory": False}
    assert weights.ratios(1.0, 0.0, 0.0, 0)["met"]["naive"] is False  # nothing measured: not met


def test_the_table_gives_each_size_and_its_ratios():
    size = {
        "bytes": 512 * MIB,
        "triton_release": {"release_s": 19.3, "peak_rss_bytes": 95 * MIB, "steps": {}},
        "naive": {"release_s": 33.7, "steps": {}},
        "floor": {"total_s": 5.0, "steps": {}},
        **weights.ratios(19.3, 33.7, 5.0, 95 * MIB),
    }
    text = weights.table({"models": 20, "revision": "abc1234", "sizes": [size]})
    assert "| 512 MiB | 19.30 | 33.70 | 5.00 | 0.573 | 3.86 | 95 |" in text
    assert "New weights in one model of 20 (abc1234)" in text


RESULTS = json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))
BENCHMARKS = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())

# Each figure docs/benchmarks.md gives: its path in `new_weights`, and the text it gives it as.
DOCUMENTED = {
    "revision": ("revision 5c3af62", lambda v: f"revision {v[:7]}"),
    "sizes.0.triton_release.release_s": ("| triton-release | 17.09 |", lambda v: f"| triton-release | {v:.2f} |"),
    "sizes.0.naive.release_s": ("| naive pipeline | 72.33 |", lambda v: f"| naive pipeline | {v:.2f} |"),
    "sizes.0.floor.total_s": ("upload 3.61) | 4.45 |", lambda v: f"upload 3.61) | {v:.2f} |"),
    "sizes.0.floor.steps.read_and_hash": ("read and hash 0.83", lambda v: f"read and hash {v:.2f}"),
    "sizes.0.floor.steps.upload": ("upload 3.61", lambda v: f"upload {v:.2f}"),
    "sizes.0.release_over_naive": ("0.236 of the naive", lambda v: f"{v} of the naive"),
    "sizes.0.release_over_floor": ("3.84 times the floor", lambda v: f"{v:.2f} times the floor"),
    "sizes.0.triton_release.steps.build": ("build step took 8.56 s", lambda v: f"build step took {v:.2f} s"),
    "sizes.0.triton_release.steps.test": ("test step 4.36 s", lambda v: f"test step {v:.2f} s"),
    "sizes.0.triton_release.steps.bump": ("bump 0.64 s", lambda v: f"bump {v:.2f} s"),
    "sizes.0.triton_release.steps.push": ("push 1.69 s", lambda v: f"push {v:.2f} s"),
    "sizes.0.triton_release.steps.commit": ("release commit 0.07 s", lambda v: f"release commit {v:.2f} s"),
    "sizes.0.triton_release.peak_rss_bytes": ("97 MiB", lambda v: f"{v / MIB:.0f} MiB"),
}


def figure(path: str):
    value = RESULTS["new_weights"]
    for key in path.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


@pytest.mark.parametrize("path", DOCUMENTED)
def test_each_documented_figure_is_the_measured_one_and_on_the_page(path):
    text, shown = DOCUMENTED[path]
    assert shown(figure(path)) == text, f"new_weights.{path} is {figure(path)}: docs/benchmarks.md says {text}"
    assert text in BENCHMARKS


def test_the_page_says_which_goals_the_run_met():
    met = figure("sizes.0.met")
    assert met == {"naive": True, "floor": False, "peak_memory": True}
    assert "(goal: at most 1.5, not met)" in BENCHMARKS
