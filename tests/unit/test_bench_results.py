"""bench/results.json is the code's: the revision of its main figures and of each section measured
apart (`fanout`, `latency`, each with its own `revision`) is a commit of this repository's history,
an ancestor of HEAD, measured on a clean tree (never "<sha>+modified"), and the main figures are a
full run's, not the smoke profile's (`--quick`). The rule itself is bench/revision.py's `problems`,
tested on repositories made in tmp_path (tests/unit/test_bench_revision.py).

A checkout without git history (an unpacked tarball) fails here, saying so: the file's freshness
cannot be checked there, and that is not a pass. CI's clone of a local path has the history."""

from __future__ import annotations

import json

from bench.revision import problems
from support.stack import ROOT

RESULTS = ROOT / "bench" / "results.json"


def test_the_committed_figures_name_revisions_of_this_history_measured_on_clean_trees():
    found = problems(json.loads(RESULTS.read_text(encoding="utf-8")), ROOT)
    assert not found, (
        "bench/results.json is not this code's figures:\n"
        + "\n".join(f"- {problem}" for problem in found)
        + "\nRun `make bench` on a clean tree of a commit of this branch and commit the file it writes."
    )
