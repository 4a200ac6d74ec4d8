"""The default path on the real stack: perf_analyzer present (on PATH, as the action's image holds
it) and no latency bound, the release measures no latency and says so; `--measure-latency` asks for
the figures without a bound. Behaviour only: what the report and the step summary say."""

from __future__ import annotations

import os

import pytest

from support.models import python_model_files
from support.stack import PERF_ANALYZER

pytestmark = pytest.mark.integration


def test_with_perf_analyzer_present_and_no_bound_a_release_measures_no_latency_unless_asked(git_repo, releaser):
    assert PERF_ANALYZER.exists(), f"{PERF_ANALYZER} is missing: `make stack` installs it (stack/stack.py)"
    git_repo.write(python_model_files("a"))
    git_repo.commit("a: adds one")
    releaser()  # 1.0.0: the version the next one would be measured against
    git_repo.write({"a/1/model.py": python_model_files("a")["a/1/model.py"] + "# faster, they say\n"})
    git_repo.commit("a: a new version")

    # the action's default release, with perf_analyzer on PATH as in the action's image
    released, summary = releaser.action(git_repo.root, {"PATH": f"{PERF_ANALYZER.parent}:{os.environ['PATH']}"})
    assert released["version"] == "1.1.0" and "push" in released["steps"]
    test = released["steps"]["test"]
    latency = test["latency"]
    assert latency["asked"] is False and latency["models"] == [] and latency["perf_analyzer"] is None
    assert latency["note"].startswith("not measured: no max_latency_increase is set")
    assert "latency" not in test["phases"]  # the gate never ran, not even its set-up
    assert [d["model"] for d in test["drift"]] == ["a"]  # drift still compares the versions
    assert "**Latency**: not measured" in summary

    # asked for without a bound: measured and reported, never refused
    git_repo.write({"a/2/model.py": python_model_files("a")["a/1/model.py"] + "# and again\n"})
    git_repo.commit("a: another version")
    measured = releaser(
        "--measure-latency", "--latency-rounds", "2", "--latency-interval", "100", "--perf-analyzer", str(PERF_ANALYZER)
    )
    latency = measured["steps"]["test"]["latency"]
    assert latency["asked"] is True and latency["max_latency_increase"] is None
    [model] = latency["models"]
    assert (model["model"], model["from_version"], model["to_version"]) == ("a", 2, 3)
    assert model["verdict"] == "measured", model.get("note")
    assert len([r for r in model["rounds"] if not r["warmup"]]) == 4  # every pair: no bound to stop early at
