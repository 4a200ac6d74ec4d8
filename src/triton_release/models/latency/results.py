"""What the latency gate measured and what it concluded: each `Round` of perf_analyzer figures,
the `Comparison` of two versions at one concurrency (`compare`: medians over the counted rounds,
ratios with their intervals from models/latency/stats.py), each version's `ColdStart` and the
warnings they give (`cold_warnings`), a version that crashed, hung or errored under the load
(`UnderLoad`), a model's outcome (`ModelLatency`) and the run's (`LatencyRun`), each as the JSON
report holds it. (Measuring them: models/latency/meter.py.)

A model's verdict, beside the statistics' pass, inconclusive, refused and measured: `failed`, its
new version crashed, hung or errored under the load (a regression in itself: refused with a
bound); `not gated`, left out of the gate, with the reason (a sequence or decoupled model, no case
to replay, version N not loaded or failing under the load); `new`, no version before it to
compare with."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from triton_release.models.latency import stats
from triton_release.models.latency.perf_analyzer import Level, PerfAnalyzer
from triton_release.models.workload import Workload

COLD_LOAD_MARGIN_S = 0.5  # cold-start differences below these are noise, never a warning
COLD_REQUEST_MARGIN_MS = 25.0
FAILED, NOT_GATED, NEW = "failed", "not gated", "new"


@dataclass(frozen=True)
class Round:
    index: int  # the order it ran in, from 1; 0: a warm-up round (not counted)
    version: int
    levels: tuple[Level, ...]
    interval_ms: int
    windows: int = 3  # perf_analyzer's measurement windows of interval_ms

    def to_json(self) -> dict:
        return {
            "round": self.index,
            "version": self.version,
            "warmup": self.index == 0,
            "interval_ms": self.interval_ms,
            "windows": self.windows,
            "levels": [
                {
                    "concurrency": lv.concurrency,
                    "p50_us": lv.p50_us,
                    "p90_us": lv.p90_us,
                    "p99_us": lv.p99_us,
                    "throughput": lv.throughput,
                }
                for lv in self.levels
            ],
        }


@dataclass(frozen=True)
class Figures:
    """A version's medians over its rounds at one concurrency."""

    p50_us: float
    p99_us: float
    throughput: float

    def to_json(self) -> dict:
        return {
            "p50_us": round(self.p50_us, 1),
            "p99_us": round(self.p99_us, 1),
            "throughput": round(self.throughput, 2),
        }

    def shown(self) -> str:
        return f"p50 {self.p50_us / 1000:.2f} ms, p99 {self.p99_us / 1000:.2f} ms, {self.throughput:.0f} infer/s"


@dataclass(frozen=True)
class Comparison:
    concurrency: int
    pairs: int
    before: Figures  # version N
    after: Figures  # version N+1
    p50: stats.Ratio
    p99: stats.Ratio
    throughput: stats.Ratio
    verdict: str  # pass | inconclusive | refused | measured (no bound)
    early: stats.Ratio | None = None  # the stricter interval that stopped the rounds early, if it did

    def to_json(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "pairs": self.pairs,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "p50_ratio": self.p50.to_json(),
            "p99_ratio": self.p99.to_json(),
            "throughput_ratio": self.throughput.to_json(),
            "verdict": self.verdict,
            "early_stop": None if self.early is None else {"pairs": self.pairs, "p50_ratio": self.early.to_json()},
        }


def compare(
    rounds: Iterable[Round], previous: int, version: int, bound: float | None, early: float | None = None
) -> tuple[Comparison, ...]:
    """Each concurrency level's comparison over the counted rounds, paired in the order they ran.
    `early`: the confidence of the early look that stopped the rounds (`settled`), whose interval
    each comparison then carries beside the 95% one."""
    found = []
    for level, before, after in _paired(rounds, previous, version):
        p50 = stats.ratio([x.p50_us for x in before], [x.p50_us for x in after])
        found.append(
            Comparison(
                level,
                len(before),
                _figures(before),
                _figures(after),
                p50,
                stats.ratio([x.p99_us for x in before], [x.p99_us for x in after]),
                stats.ratio([x.throughput for x in before], [x.throughput for x in after]),
                stats.verdict(p50, bound),
                None if early is None else stats.early([x.p50_us for x in before], [x.p50_us for x in after], early),
            )
        )
    return tuple(found)


def settled(rounds: Iterable[Round], previous: int, version: int, bound: float | None, confidence: float) -> bool:
    """An early look: at every concurrency level, the p50 ratio's early interval (stats.early, at
    `confidence`) lies wholly on one side of 1 + bound, so more rounds would not change the verdict."""
    found = [
        stats.early([x.p50_us for x in before], [x.p50_us for x in after], confidence)
        for _, before, after in _paired(rounds, previous, version)
    ]
    return bool(found) and all(stats.decided(r, bound) for r in found)


def _paired(rounds: Iterable[Round], previous: int, version: int) -> list[tuple[int, list[Level], list[Level]]]:
    """(concurrency, N's figures, N+1's figures) of each level over the counted rounds, as many of
    each as there are pairs, in the order they ran."""
    counted = [r for r in rounds if r.index > 0]
    found = []
    for level in sorted({lv.concurrency for r in counted for lv in r.levels}):

        def series(v: int, level: int = level) -> list[Level]:
            return [lv for r in counted if r.version == v for lv in r.levels if lv.concurrency == level]

        before, after = series(previous), series(version)
        pairs = min(len(before), len(after))
        if pairs:
            found.append((level, before[:pairs], after[:pairs]))
    return found


def _figures(levels: list[Level]) -> Figures:
    return Figures(
        statistics.median(x.p50_us for x in levels),
        statistics.median(x.p99_us for x in levels),
        statistics.median(x.throughput for x in levels),
    )


@dataclass(frozen=True)
class ColdStart:
    version: int
    load_s: float | None = None
    first_request_ms: float | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "load_s": None if self.load_s is None else round(self.load_s, 3),
            "first_request_ms": None if self.first_request_ms is None else round(self.first_request_ms, 2),
            **({"note": self.note} if self.note else {}),
        }


def cold_warnings(model: str, before: ColdStart, after: ColdStart, bound: float | None) -> tuple[str, ...]:
    """N+1's load time or first request beyond 1 + bound of N's (and beyond the noise margins)."""
    if bound is None:
        return ()
    found = []
    for what, unit, a, b, margin in (
        ("load", "s", before.load_s, after.load_s, COLD_LOAD_MARGIN_S),
        ("first request", "ms", before.first_request_ms, after.first_request_ms, COLD_REQUEST_MARGIN_MS),
    ):
        if a is not None and b is not None and b > a * (1 + bound) and b - a > margin:
            found.append(
                f"{model}: cold start: version {after.version}'s {what} took {b:.2f} {unit}, version "
                f"{before.version}'s {a:.2f} {unit}: more than max_latency_increase {bound:g} slower (a "
                "single measurement: a warning, not a refusal)"
            )
    return tuple(found)


@dataclass(frozen=True)
class UnderLoad:
    """A version that crashed, hung or errored while perf_analyzer drove it."""

    version: int
    what: str  # crashed | hung | errored (models/latency/perf_analyzer.py)
    error: str  # what perf_analyzer saw: the server's error, or how long it waited
    server_lines: tuple[str, ...] = ()  # the server log's last lines naming the model

    def shown(self) -> str:
        return f"version {self.version} {self.what} under the gate's load ({self.error})"

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "what": self.what,
            "error": self.error,
            "server_lines": list(self.server_lines),
        }


@dataclass(frozen=True)
class ModelLatency:
    model: str
    version: int  # N+1
    previous: int | None  # N
    comparisons: tuple[Comparison, ...] = ()
    rounds: tuple[Round, ...] = ()
    cold_start: tuple[ColdStart, ...] = ()  # N's, then N+1's
    load: Workload | None = None
    seconds: float = 0.0  # what measuring it took
    note: str = ""  # why it was not measured (or not fully)
    warnings: tuple[str, ...] = ()
    under_load: UnderLoad | None = None  # a version that crashed, hung or errored under the load

    @property
    def measured(self) -> bool:
        return bool(self.comparisons) and not self.failed

    @property
    def failed(self) -> bool:
        """Its new version crashed, hung or errored under the load: a regression in itself."""
        return self.under_load is not None and self.under_load.version == self.version

    @property
    def verdict(self) -> str:
        if self.failed:
            return FAILED
        if self.comparisons:
            return stats.worst([c.verdict for c in self.comparisons])
        return NEW if self.previous is None else NOT_GATED

    @property
    def deciding(self) -> Comparison | None:
        """The comparison behind the verdict: the first level with it."""
        return next((c for c in self.comparisons if c.verdict == self.verdict), None)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "from_version": self.previous,
            "to_version": self.version,
            "verdict": self.verdict,
            "note": self.note,
            "seconds": round(self.seconds, 2),
            "comparisons": [c.to_json() for c in self.comparisons],
            "rounds": [r.to_json() for r in self.rounds],
            "cold_start": [c.to_json() for c in self.cold_start],
            "workload": self.load.to_json() if self.load is not None else None,
            "warnings": list(self.warnings),
            "under_load": self.under_load.to_json() if self.under_load is not None else None,
        }


@dataclass(frozen=True)
class LatencyRun:
    """The gate's outcome over a test run."""

    bound: float | None
    rounds: int
    interval_ms: int
    perf_analyzer: PerfAnalyzer | None = None
    note: str = ""  # why nothing was measured
    models: tuple[ModelLatency, ...] = ()
    unmeasured: str = "allow"  # refuse: with a bound, a model left out of the gate refuses the release
    asked: bool = True  # a bound or measure_latency asked for it; False: not measured by default

    @property
    def refused(self) -> list[ModelLatency]:
        return [m for m in self.models if m.verdict == stats.REFUSED]

    @property
    def failed(self) -> list[ModelLatency]:
        """New versions that crashed, hung or errored under the load."""
        return [m for m in self.models if m.verdict == FAILED]

    @property
    def not_gated(self) -> list[ModelLatency]:
        """Models with a version before that the gate left out, each with its reason (`note`)."""
        return [m for m in self.models if m.verdict == NOT_GATED]

    @property
    def inconclusive(self) -> list[ModelLatency]:
        return [m for m in self.models if m.verdict == stats.INCONCLUSIVE]

    def to_json(self) -> dict:
        return {
            "max_latency_increase": self.bound,
            "rounds": self.rounds,
            "interval_ms": self.interval_ms,
            "perf_analyzer": self.perf_analyzer.to_json() if self.perf_analyzer else None,
            "note": self.note,
            "asked": self.asked,
            "latency_unmeasured": self.unmeasured,
            "not_gated": [{"model": m.model, "because": m.note} for m in self.not_gated],
            "models": [m.to_json() for m in self.models],
        }
