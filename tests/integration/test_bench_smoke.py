"""The benchmark runs end to end at a tiny size, so that it cannot rot. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.stack import ROOT

pytestmark = pytest.mark.integration

KEYS = {
    "machine",
    "date",
    "n_models",
    "weights_bytes",
    "release_s",
    "uploaded_bytes",
    "ready_s",
    "golden_cases_per_s",
    "rollback_s",
    "scaling",
}


def head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_bench_smoke(docker_client, tmp_path):
    out, plot = tmp_path / "results.json", tmp_path / "results.png"
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out), "--plot", str(plot)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures) >= KEYS
    assert figures["profile"] == "quick" and figures["revision"].startswith(head())  # its sha, "+modified" if dirty
    assert set(figures["scaling"]) >= {"validate_s", "changed_s", "release_s"}
    assert figures["scaling"]["validate_s"].keys() == {"3"} and figures["changed_history_s"]["commits"] == 6
    # bytes come from the registry's manifests: ours is the changed version's layer, naive the whole repository
    assert 4096 <= figures["uploaded_bytes"]["triton_release"] < figures["uploaded_bytes"]["naive"]
    assert figures["rebuild"]["ours"]["new_layers"] == 1
    assert set(figures["golden_cases_per_s"]) == {"http", "http_concurrent", "grpc", "grpc_concurrent"}
    # scaling: tiny models, one changed by 4096 bytes of weights; its first release tested in one wave
    scaling = figures["scaling"]
    assert scaling["release_s"].keys() == {"2"} and scaling["naive_release_s"]["2"] is not None
    assert 4096 <= scaling["uploaded_bytes"]["2"]["triton_release"] <= scaling["uploaded_bytes"]["2"]["naive"]
    assert scaling["first_release"]["2"]["waves"] == 1 and scaling["first_release"]["2"]["image_layers"] > 0
    assert set(scaling["goals"]) == {"release_time", "uploaded_over_changed"}
    assert "requirements_change" not in figures  # --skip-requirements
    assert "| release of a one-model change (s) |" in result.stdout
    # every release timed runs as the action runs it: perf_analyzer present, no latency setting, so no
    # latency is measured (docs/latency.md, the default)
    assert figures["default_path"]["perf_analyzer"].endswith("/perf_analyzer")
    assert figures["default_path"]["max_latency_increase"] is None and not figures["default_path"]["measure_latency"]
    assert "Releases run as the action runs them: perf_analyzer present" in result.stdout
    # step by step: ours with the test step split into its report's phases, the naive pipeline's three
    steps = figures["release_s"]["steps"]
    assert list(steps["naive"]) == ["build", "serve+check", "push"]
    phases = {"server_start", "load", "golden_cases", "drift_load", "drift", "server_stop"}  # a new version: drift
    assert {"build", "push", *(f"test: {phase}" for phase in phases)} <= set(steps["triton_release"])
    assert "test: latency" not in steps["triton_release"]  # perf_analyzer on PATH, and not run
    assert "| test: golden_cases |" in result.stdout and "| serve+check |" in result.stdout
    # the upload beside the tests: the same change pushed by the registry path, then by the daemon
    # (--upload-during-tests false), and by the naive pipeline; each uploads the new weights
    overlap = figures["upload_overlap"]
    assert overlap["new_weights_bytes"] == 65536 and overlap["repeat"] == 1
    assert overlap["overlap"]["pushed_by"] == ["registry"] and overlap["overlap"]["upload_s"] is not None
    assert overlap["daemon"]["pushed_by"] == ["daemon"]
    for side in ("overlap", "daemon", "naive"):
        assert overlap[side]["uploaded_bytes"] >= 65536, side
    assert overlap["release_over_max"] is not None and "| pushed by | registry | daemon |" in result.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_weights_smoke(docker_client, tmp_path):
    """New weights at a tiny size: triton-release, the naive pipeline and the floor, side by side."""
    out = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench.weights", "--quick", "--models", "2", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())["new_weights"]
    assert figures["revision"].startswith(head()) and figures["models"] == 2
    (size,) = figures["sizes"]
    assert size["bytes"] == 1024 * 1024
    assert list(size["naive"]["steps"]) == ["copy", "build", "serve+check", "push", "git"]
    assert list(size["floor"]["steps"]) == ["read_and_hash", "upload"]
    # the daemon's own copy of the new bytes, apart from the floor; its image removed
    assert list(size["daemon_copy"]["steps"]) == ["write_tar", "load"] and size["daemon_copy"]["total_s"] > 0
    assert not docker_client.images.list(name="bench-daemon-copy")
    assert {"bump", "build", "test", "push", "commit"} <= set(size["triton_release"]["steps"])
    assert size["triton_release"]["peak_rss_bytes"] > 0
    assert "| new weights | triton-release (s) |" in result.stdout
