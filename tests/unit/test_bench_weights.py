"""The new-weights benchmark's figures (bench/weights.py): its goals read off one size's
measurements, and its table. No Docker: the figures come from `python -m bench.weights`."""

from __future__ import annotations

import json
import os
import sys

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


RESULTS = json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))["new_weights"]
BENCHMARKS = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
SIZES = {f"{size['bytes'] // MIB} MiB": size for size in RESULTS["sizes"]}


def test_the_run_measured_512_mib_and_4_gib_and_1_mib_at_a_commit_the_page_names():
    assert list(SIZES) == ["512 MiB", "4097 MiB"]
    assert f"(revision {RESULTS['revision'][:7]}, {RESULTS['date']}" in BENCHMARKS


def test_the_pages_table_is_the_measured_one():
    rows = [row for row in weights.table(RESULTS).splitlines() if row.startswith("| ") and " MiB |" in row]
    assert len(rows) == len(SIZES)
    for row in rows:
        assert row in BENCHMARKS, f"docs/benchmarks.md lacks the measured row {row}"


@pytest.mark.parametrize("label", ["512 MiB", "4097 MiB"])
def test_where_each_sizes_time_goes_is_the_measured_one(label):
    size = SIZES[label]
    ours, floor = size["triton_release"]["steps"], size["floor"]["steps"]
    steps = ", ".join(f"{name} {ours[name]:.2f} s" for name in ("build", "test", "bump", "push", "commit"))
    assert f"{label}: {steps}" in BENCHMARKS
    assert f"{label}: read and hash {floor['read_and_hash']:.2f} s, upload {floor['upload']:.2f} s" in BENCHMARKS
    copy = size["daemon_copy"]["steps"]
    assert f"{label}: layer tar written {copy['write_tar']:.2f} s, loaded into the daemon {copy['load']:.2f} s" in (
        BENCHMARKS
    )


def test_what_the_daemons_own_copy_leaves_of_the_floor_goal_is_the_measured_one():
    size = SIZES["4097 MiB"]
    floor, copy = size["floor"], size["daemon_copy"]
    load = copy["steps"]["load"]
    assert f"the daemon's load alone, {load:.2f} s, is {load / floor['total_s']:.2f} times the whole floor" in (
        BENCHMARKS
    )
    with_hash = (load + floor["steps"]["read_and_hash"]) / floor["total_s"]
    assert f"with one read and hash of the bytes {with_hash:.2f} times" in BENCHMARKS and with_hash > weights.GOAL_FLOOR
    both = floor["total_s"] + copy["total_s"]
    release = size["triton_release"]["release_s"]
    assert f"own copy is {both:.2f} s, and the release took {release / both:.2f} times that" in BENCHMARKS


@pytest.mark.parametrize("label", ["512 MiB", "4097 MiB"])
def test_the_page_says_which_goals_each_size_met(label):
    met = {goal: "met" if flag else "not met" for goal, flag in SIZES[label]["met"].items()}
    said = (
        f"Goals at {label}: at most {weights.GOAL_NAIVE} of naive, {met['naive']}; at most "
        f"{weights.GOAL_FLOOR} times the floor, {met['floor']}; peak memory under 1 GiB, {met['peak_memory']}."
    )
    assert said in BENCHMARKS


def test_the_peak_memory_is_the_commands_not_this_processs():
    """A process spawned from a large one starts with its peak: the release is measured apart."""
    held = bytearray(400 * MIB)
    for i in range(0, len(held), 4096):
        held[i] = 1
    seconds, code, out, peak = weights.measured([sys.executable, "-c", "print('ran')"], ROOT, dict(os.environ))
    assert code == 0 and out == b"ran\n" and seconds > 0
    assert 0 < peak < 100 * MIB, f"{peak / MIB:.0f} MiB"
    blown = weights.measured(
        [sys.executable, "-c", "b = bytearray(300 * 1024 * 1024); b[::4096] = b'1' * len(b[::4096])"],
        ROOT,
        dict(os.environ),
    )
    assert blown[1] == 0 and 300 * MIB < blown[3] < 400 * MIB
    del held
