"""The benchmark runs end to end at a tiny size, so that it cannot rot. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT


def test_bench_smoke(docker_client, tmp_path):
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, "-m", "bench", "--sizes", "3", "--history", "4,6", "--repeat", "1", "--rebuild", "3,1024", "--serve", "2,16", "--cases", "4",
                             "--json", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    assert set(figures["validate_s"]) == {"3"} and figures["changed_history_s"]["commits"] == 6
    assert "| 3 |" in result.stdout
    assert figures["rebuild"]["ours"]["new_layers"] == 1  # the new version folder, nothing else
    assert figures["rebuild"]["naive"]["reused_layers"] == 0
    assert set(figures["serve"]["golden_cases_per_s"]) == {"http", "http_concurrent", "grpc", "grpc_concurrent"}
