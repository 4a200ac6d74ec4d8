"""The upload-overlap benchmark's figures (bench/upload.py, bench/report.py), from made-up reports:
a release's figures read from its report, the ratios, the medians, the section and its table. No
Docker: the figures themselves come from `make bench`, and the page gives them."""

from __future__ import annotations

import json

import pytest

from bench import report, upload
from support.stack import ROOT


def made_up_report(test: float, push: float, during: dict | None) -> dict:
    return {
        "steps": {
            "build": {"seconds": 1.0, "ok": True},
            "test": {"seconds": test, "ok": True},
            "push": {
                "seconds": push,
                "ok": True,
                "pushed_by": "registry" if during else "daemon",
                "uploaded_during_tests": during,
            },
        }
    }


def test_a_releases_figures_come_from_its_report_with_the_upload_threads_seconds():
    during = {"seconds": 3.5, "bytes_uploaded": 1024, "blobs_uploaded": 1}
    figures = upload.release_figures(6.0, made_up_report(4.0, 0.25, during))
    assert figures == {
        "release_s": 6.0,
        "build_s": 1.0,
        "test_s": 4.0,
        "push_s": 0.25,
        "other_s": 0.75,
        "upload_s": 3.5,
        "upload_bytes": 1024,
        "pushed_by": "registry",
        "steps": {"build": 1.0, "test": 4.0, "push": 0.25},
    }
    daemon = upload.release_figures(9.0, made_up_report(4.0, 3.0, None))
    assert daemon["upload_s"] is None and daemon["pushed_by"] == "daemon"


def test_the_ratios_are_over_the_longer_of_test_and_upload_and_over_their_sum():
    assert upload.ratios(5.75, 5.0, 4.0) == {"release_over_max": 1.15, "release_over_sum": 0.639}
    assert upload.ratios(1.0, 0.0, 0.0) == {"release_over_max": None, "release_over_sum": None}


def test_medians_take_numbers_and_list_the_other_values():
    runs = [
        {"a": 1.0, "by": "registry", "u": None},
        {"a": 3.0, "by": "daemon", "u": None},
        {"a": 2.0, "by": "registry", "u": None},
    ]
    assert upload.medians(runs) == {"a": 2.0, "by": ["daemon", "registry"], "u": None}
    steps = [{"steps": {"build": 1.0, "test": 4.0}}, {"steps": {"build": 3.0, "test": 2.0}}, {"steps": {"build": 2.0}}]
    assert upload.medians(steps) == {"steps": {"build": 2.0, "test": 2.0}}  # a step a run lacks counts 0


def overlap_run(release: float, test: float, upload_s: float) -> dict:
    return {
        "release_s": release,
        "build_s": 1.0,
        "test_s": test,
        "push_s": 0.1,
        "upload_s": upload_s,
        "uploaded_bytes": 2048,
        "pushed_by": "registry",
    }


def daemon_run(release: float, test: float, push: float) -> dict:
    return {
        "release_s": release,
        "build_s": 1.0,
        "test_s": test,
        "push_s": push,
        "upload_s": None,
        "uploaded_bytes": 2048,
        "pushed_by": "daemon",
    }


NAIVE = [{"release_s": 12.0, "build_s": 3.0, "serve+check_s": 6.0, "push_s": 3.0, "uploaded_bytes": 4096}]


def test_the_section_gives_each_sides_medians_the_ratios_of_each_overlap_run_and_todays_test_plus_upload():
    overlap = [overlap_run(6.0, 5.0, 4.0), overlap_run(5.5, 5.0, 5.0), overlap_run(7.0, 5.0, 2.0)]
    daemon = [daemon_run(9.0, 5.0, 4.0), daemon_run(10.0, 5.0, 5.0), daemon_run(8.0, 5.0, 3.0)]
    section = upload.summary(overlap, daemon, NAIVE)
    assert section["release_over_max"] == pytest.approx(1.2)  # the median of 1.2, 1.1 and 1.4
    assert section["release_over_sum"] == pytest.approx(0.667)  # of 0.667, 0.55 and 1.0
    assert section["today_test_plus_upload_s"] == 9.0
    assert section["test_and_push_over_max"] == pytest.approx(1.02)  # (5 + 0.1) / 5 in each run
    assert section["met"] is False and section["goal"] == 1.15
    assert section["overlap"]["release_s"] == 6.0 and section["daemon"]["push_s"] == 4.0
    assert section["naive"]["serve+check_s"] == 6.0 and len(section["runs"]["overlap"]) == 3
    assert upload.summary([overlap_run(5.5, 5.0, 5.0)], [daemon_run(9.0, 5.0, 4.0)], None)["met"] is True


def test_the_table_shows_the_three_sides_and_the_ratios():
    section = {
        "models": 4,
        "new_weights_bytes": 512 * 1024 * 1024,
        "repeat": 1,
        **upload.summary([overlap_run(6.0, 5.0, 4.0)], [daemon_run(9.0, 5.0, 4.0)], NAIVE),
    }
    rows = "\n".join(report.upload_table(section))
    assert "512.00 MiB of new random weights" in rows
    assert "| figure | upload during the tests | daemon push after the tests | naive |" in rows
    assert "| upload (s) | 4.00 | 4.00 | 3.00 |" in rows  # the thread's; the daemon's and naive's push step
    assert "| test (s) | 5.00 | 5.00 | 6.00 |" in rows  # naive: its serve+check
    assert "| pushed by | registry | daemon | docker push |" in rows
    assert "Release over max(test, upload): 1.20 (goal <= 1.15: **not met**)" in rows
    assert "today's test + upload (the daemon side's test and push steps): 9.00 s" in rows
    with_steps = {**section, "overlap": {**section["overlap"], "steps": {"build": 1.0, "test": 5.0}}}
    assert "Steps, upload during the tests (s): build 1.00, test 5.00." in "\n".join(report.upload_table(with_steps))
    without_naive = {**section, "naive": None}
    assert "| naive |" not in "\n".join(report.upload_table(without_naive))


def test_the_random_weights_are_written_in_chunks_to_the_size_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(upload, "CHUNK", 1000)
    upload.write_random(tmp_path / "w.bin", 2500)
    data = (tmp_path / "w.bin").read_bytes()
    assert len(data) == 2500 and len(set(data)) > 100  # random, not a repeated byte


def test_the_pages_figures_of_the_upload_beside_the_tests_are_the_measured_ones():
    """docs/benchmarks.md's table of the upload beside the tests, row by row, from bench/results.json."""
    section = json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))["upload_overlap"]
    page = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
    ours, daemon, naive = section["overlap"], section["daemon"], section["naive"]
    rows = {
        "release (s)": (ours["release_s"], daemon["release_s"], naive["release_s"]),
        "build (s)": (ours["build_s"], daemon["build_s"], naive["build_s"]),
        "test (s)": (ours["test_s"], daemon["test_s"], naive["serve+check_s"]),
        "upload (s)": (ours["upload_s"], daemon["push_s"], naive["push_s"]),
        "push step (s)": (ours["push_s"], daemon["push_s"], naive["push_s"]),
    }
    for name, values in rows.items():
        assert f"| {name} | " + " | ".join(f"{v:.2f}" for v in values) + " |" in page, name
    assert f"(`upload_overlap.revision` {section['revision'][:7]}, {section['date']};" in page
    assert f"**not met ({section['release_over_max']:.2f})**" in page and not section["met"]
