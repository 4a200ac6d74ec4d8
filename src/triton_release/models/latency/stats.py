"""The latency gate's statistics: the ratio of two versions' per-round medians, its bootstrap
confidence interval, and the verdict against a bound. Pure functions of the figures, seeded, so
the same rounds give the same interval on any machine.

Rounds come in pairs run next to each other (A B, then B A, ...: models/latency/), so that what
a shared runner does to both versions at once cancels out. The ratio is median(after) /
median(before) over the rounds; its interval resamples the pairs (not the rounds one by one: a
pair shares its moment's noise) with replacement, and takes the percentiles of the ratio of the
resampled medians. The gate refuses only when the whole interval lies above 1 + bound; an
interval straddling it is inconclusive; one wholly at or below it passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 4000
CONFIDENCE = 0.95
SEED = 28  # any fixed seed: the interval is a function of the figures alone

PASS, INCONCLUSIVE, REFUSED, MEASURED = "pass", "inconclusive", "refused", "measured"


@dataclass(frozen=True)
class Ratio:
    """N+1 / N of a figure: the ratio of the medians and its confidence interval."""

    estimate: float
    low: float
    high: float

    def to_json(self) -> dict:
        return {"ratio": _rounded(self.estimate), "low": _rounded(self.low), "high": _rounded(self.high)}

    def shown(self) -> str:
        return f"{self.estimate:.2f}x [{self.low:.2f}, {self.high:.2f}]"


def _rounded(value: float) -> float | str:
    return round(value, 4) if math.isfinite(value) else "Infinity"


def ratio(
    before: Sequence[float],
    after: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Ratio:
    """median(after) / median(before), with the percentile bootstrap interval over the pairs
    (before[i], after[i]). Needs at least one pair; with one, the interval is the estimate."""
    a, b = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if a.size != b.size or a.size == 0:
        raise ValueError(f"{a.size} rounds of one version against {b.size} of the other: pairs are needed")
    estimate = _divide(float(np.median(b)), float(np.median(a)))
    if a.size == 1:
        return Ratio(estimate, estimate, estimate)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, a.size, size=(resamples, a.size))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.median(b[picks], axis=1) / np.median(a[picks], axis=1)
    ratios = np.nan_to_num(ratios, nan=math.inf, posinf=math.inf)
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return Ratio(estimate, float(low), float(high))


def _divide(top: float, bottom: float) -> float:
    return top / bottom if bottom > 0 else (math.inf if top > 0 else 1.0)


def verdict(latency: Ratio, bound: float | None) -> str:
    """refused: the whole interval above 1 + bound; inconclusive: it straddles 1 + bound; pass:
    at or below; measured: no bound was given."""
    if bound is None:
        return MEASURED
    limit = 1 + bound
    if latency.low > limit:
        return REFUSED
    if latency.high > limit:
        return INCONCLUSIVE
    return PASS


def worst(verdicts: Sequence[str]) -> str:
    """A model's verdict over its concurrency levels: refused over inconclusive over pass."""
    for found in (REFUSED, INCONCLUSIVE, PASS):
        if found in verdicts:
            return found
    return MEASURED


def alternating(rounds: int) -> list[tuple[str, str]]:
    """The order of `rounds` pairs: (before, after), then (after, before), and so on: A B B A A B."""
    return [("before", "after") if i % 2 == 0 else ("after", "before") for i in range(rounds)]
