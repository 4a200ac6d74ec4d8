"""The new-weights benchmark's figures (bench/weights.py): its goals read off one size's
measurements, and its table. No Docker: the figures come from `python -m bench.weights`."""

from __future__ import annotations

from bench import weights

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
