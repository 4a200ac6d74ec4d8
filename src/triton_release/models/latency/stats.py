"""The latency gate's statistics: the ratio of two versions' per-round medians, its bootstrap
confidence interval, and the verdict against a bound. Pure functions of the figures, seeded, so
the same rounds give the same interval on any machine.

Rounds come in pairs run next to each other (A B, then B A, ...: models/latency/), so that what
a shared runner does to both versions at once cancels out. The ratio is median(after) /
median(before) over the rounds; its interval resamples the pairs (not the rounds one by one: a
pair shares its moment's noise) with replacement, and takes the percentiles of the ratio of the
resampled medians. The gate refuses only when the whole interval lies above 1 + bound; an
interval straddling it is inconclusive; one wholly at or below it passes.

Sequential stopping: the rounds stop before their maximum once, after at least MIN_PAIRS pairs,
a stricter interval (`early`) lies wholly on one side of 1 + bound. Looking after every pair and
stopping at the first look that decides would spend the error rate again at every look (the
peeking problem), so each early look gets its share of one tail's 2.5% (`early_confidence`:
Bonferroni over the looks, 97.5% at each of the two early looks of 4 pairs), and its interval is
the wider of two: the bootstrap's at that confidence, and Student's t interval of the pairs' mean
log ratio, which, unlike a bootstrap of two or three pairs (that only spans the pairs seen), widens
as it should when there are few pairs. With the final look's own 2.5% a tail, a wrong refusal (or
a wrong pass) is at most 5% over all the looks (the bootstrap's share is nominal: over a few pairs
it is narrower than the truth, which is why the t interval stands beside it). An early interval
holds the 95% bootstrap interval of the same pairs, so the verdict reported is always that 95%
interval's, whatever the count of pairs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 4000
CONFIDENCE = 0.95
MIN_PAIRS = 2  # the fewest pairs an early stop may come after
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


def early_confidence(pairs: int) -> float:
    """Each early look's confidence, when the rounds may run to `pairs` pairs: one tail's 2.5%
    shared among the early looks (after MIN_PAIRS, ..., pairs - 1 pairs), two-sided."""
    looks = max(1, pairs - MIN_PAIRS)
    return 1 - 2 * (1 - CONFIDENCE) / 2 / looks


def early(before: Sequence[float], after: Sequence[float], confidence: float) -> Ratio:
    """The interval an early stop needs: the ratio of the medians, within the wider of the
    bootstrap interval and Student's t interval of the mean log ratio of the pairs, both at
    `confidence`. Unbounded below MIN_PAIRS pairs, or when a figure is not positive."""
    boot = ratio(before, after, confidence=confidence)
    a, b = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if a.size < MIN_PAIRS or not (np.all(a > 0) and np.all(b > 0)):
        return Ratio(boot.estimate, 0.0, math.inf)
    logs = np.log(b / a)
    spread = t_quantile(0.5 + confidence / 2, a.size - 1) * float(np.std(logs, ddof=1)) / math.sqrt(a.size)
    centre = float(np.mean(logs))
    return Ratio(boot.estimate, min(boot.low, math.exp(centre - spread)), max(boot.high, math.exp(centre + spread)))


def decided(latency: Ratio, bound: float | None) -> bool:
    """The interval lies wholly on one side of 1 + bound (refused or pass): nothing more to measure."""
    return bound is not None and verdict(latency, bound) != INCONCLUSIVE


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile, `p` in (0.5, 1), from its distribution function written over
    theta = atan(t / sqrt(df)): F(t) = 1/2 + c * integral of cos(theta)^(df - 1), a smooth
    integrand, summed on a fine grid and inverted by interpolation (to about 1e-6)."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"a quantile in (0.5, 1) of at least 1 degree of freedom, not {p} of {df}")
    theta = np.linspace(0.0, math.pi / 2, 200_001)
    density = np.cos(theta) ** (df - 1)
    area = np.concatenate(([0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(theta))))
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    found = float(np.interp(p - 0.5, area * scale, theta))
    return math.sqrt(df) * math.tan(found)


def alternating(rounds: int) -> list[tuple[str, str]]:
    """The order of `rounds` pairs: (before, after), then (after, before), and so on: A B B A A B."""
    return [("before", "after") if i % 2 == 0 else ("after", "before") for i in range(rounds)]
