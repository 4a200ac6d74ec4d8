"""The latency gate: each model's new version N+1 against its version N, measured with NVIDIA's
perf_analyzer in the server that tested them, side by side, on the model's golden inputs.

One import: how it measures and the meter (models/latency/meter.py), what it measured and
concluded (models/latency/results.py), its statistics (models/latency/stats.py) and perf_analyzer
as it runs it (models/latency/perf_analyzer.py).

After a wave's golden cases passed and drift compared both versions (models/drift.py, which loads
N beside N+1), each model given a new version is driven with its golden inputs
(models/workload.py), over gRPC at concurrency 1 (and at its instance count, where more than one):
one warm-up round per version first, one short window, not counted, then up to `rounds` pairs
alternating A B, B A, ... (N, N+1, N+1, N, ...), each round WINDOWS perf_analyzer windows of
`interval_ms` (longer for a slow model: at least 30 of its requests a round; twice as long again
after a window no request finished in). Every round's p50,
p90, p99 and throughput are kept; the comparison is the ratio N+1 / N of the per-round medians
with a bootstrap interval (models/latency/stats.py), per concurrency level. The gate
(`max_increase`) refuses only a model whose p50 interval lies wholly above 1 + max_increase at
some level; straddling it is inconclusive, never a refusal.

Sequential stopping: with a bound, the rounds stop before `rounds` pairs once, after at least
stats.MIN_PAIRS pairs, a stricter interval (stats.early: the wider of the bootstrap's and Student's
t, at a confidence that shares one tail's 2.5% among the early looks) lies wholly on one side of
1 + max_increase at every level. Why: most models are far from their bound (an unchanged model
at 1.00, a real slowdown well beyond it) and the intervals are narrow (about 0.5% wide), so the
later pairs only cost time. Looking after every pair would spend the error rate again at each look;
the early looks share 2.5% a tail and the last look keeps its own 2.5%, so a wrong refusal (or a
wrong pass) stays within 5% over all the looks, the 1 in 20 the gate is held to. Undecided after
the last pair is inconclusive, as before.

Cold start: then each version is loaded alone (its config as the image holds it, model_warmup
included), the load timed, and its first request timed; N+1's beyond 1 + max_increase of N's (and
by more than a small absolute margin: single measurements are noisy) is a warning. The model is
left with N+1 loaded alone, as its wave loaded it.

A new version that crashes, hangs (a round far beyond its windows: perf_analyzer.run_timeout) or
errors under the load is a regression in itself (`failed`): refused with a bound, a warning without.

Not gated, with the reason: models whose golden cases failed, whose version N did not load or
failed under the load, that have no case a plain request can replay (only error cases, sequence
and decoupled models), or that perf_analyzer could not drive. With a bound, each is listed as "not
gated, because ..."; `latency_unmeasured: refuse` makes each a refusal.
"""

from __future__ import annotations

from triton_release.models.latency.meter import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_ROUNDS,
    LatencyMeter,
    LatencyOptions,
    Server,
    instance_count,
)
from triton_release.models.latency.results import (
    ColdStart,
    Comparison,
    Figures,
    LatencyRun,
    ModelLatency,
    Round,
    UnderLoad,
    cold_warnings,
    compare,
)

__all__ = [
    "DEFAULT_INTERVAL_MS",
    "DEFAULT_ROUNDS",
    "ColdStart",
    "Comparison",
    "Figures",
    "LatencyMeter",
    "LatencyOptions",
    "LatencyRun",
    "ModelLatency",
    "Round",
    "Server",
    "UnderLoad",
    "cold_warnings",
    "compare",
    "instance_count",
]
