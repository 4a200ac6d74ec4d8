"""The latency gate: each model's new version N+1 against its version N, measured with NVIDIA's
perf_analyzer in the server that tested them, side by side, on the model's golden inputs.

After a wave's golden cases passed and drift compared both versions (models/drift.py, which loads
N beside N+1), each model given a new version is driven with its golden inputs
(models/workload.py), over gRPC at concurrency 1 (and at its instance count, where more than one):
one warm-up round per version first, not counted, then `rounds` pairs alternating A B, B A, ...
(N, N+1, N+1, N, ...), each round three perf_analyzer windows of `interval_ms` (longer for a slow
model: at least 30 of its requests a window). Every round's p50, p90, p99 and throughput are kept;
the comparison is the ratio N+1 / N of the per-round medians with a bootstrap interval
(models/latency_stats.py), per concurrency level. The gate (`max_increase`) refuses only a model
whose p50 interval lies wholly above 1 + max_increase at some level; straddling it is
inconclusive, never a refusal.

Cold start: then each version is loaded alone (its config as the image holds it, model_warmup
included), the load timed, and its first request timed; N+1's beyond 1 + max_increase of N's (and
by more than a small absolute margin: single measurements are noisy) is a warning. The model is
left with N+1 loaded alone, as its wave loaded it.

Not measured, with the reason: models whose golden cases failed, whose version N did not load,
that have no case a plain request can replay (only error cases, sequence and decoupled models).
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from triton_release import progress
from triton_release.models import latency_stats as stats
from triton_release.models.drift import drift_config
from triton_release.models.perf_analyzer import Level, MeasurementFailed, PerfAnalyzer, measure, write_input_data
from triton_release.models.repository import Repository
from triton_release.models.workload import Workload, workload
from triton_release.signals import checkpoint

DEFAULT_ROUNDS = 4  # pairs: each version measured this many times
DEFAULT_INTERVAL_MS = 300  # one perf_analyzer window; a round is three
MAX_INTERVAL_MS = 10_000
REQUESTS_PER_WINDOW = 30  # a slow model's windows are made long enough for this many requests
COLD_LOAD_MARGIN_S = 0.5  # cold-start differences below these are noise, never a warning
COLD_REQUEST_MARGIN_MS = 25.0


@dataclass(frozen=True, kw_only=True)
class LatencyOptions:
    """How the gate measures, and its bound (None: measured and reported, never refused)."""

    max_increase: float | None = None
    rounds: int = DEFAULT_ROUNDS
    interval_ms: int = DEFAULT_INTERVAL_MS
    perf_analyzer: str | None = None  # the binary; None: PATH, then the action image's
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)  # PATH, LD_LIBRARY_PATH

    @classmethod
    def from_settings(cls, settings, env: Mapping[str, str]) -> LatencyOptions:
        return cls(
            max_increase=settings.max_latency_increase,
            rounds=settings.latency_rounds,
            interval_ms=settings.latency_interval,
            perf_analyzer=settings.perf_analyzer,
            env=dict(env),
        )


# -- what is measured -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    index: int  # the order it ran in, from 1; 0: a warm-up round (not counted)
    version: int
    levels: tuple[Level, ...]
    interval_ms: int

    def to_json(self) -> dict:
        return {
            "round": self.index,
            "version": self.version,
            "warmup": self.index == 0,
            "interval_ms": self.interval_ms,
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
        }


def compare(rounds: Iterable[Round], previous: int, version: int, bound: float | None) -> tuple[Comparison, ...]:
    """Each concurrency level's comparison over the counted rounds, paired in the order they ran."""
    counted = [r for r in rounds if r.index > 0]
    levels = sorted({lv.concurrency for r in counted for lv in r.levels})
    found = []
    for level in levels:

        def series(v: int, level: int = level) -> list[Level]:
            return [lv for r in counted if r.version == v for lv in r.levels if lv.concurrency == level]

        before, after = series(previous), series(version)
        pairs = min(len(before), len(after))
        if pairs == 0:
            continue
        before, after = before[:pairs], after[:pairs]
        p50 = stats.ratio([x.p50_us for x in before], [x.p50_us for x in after])
        found.append(
            Comparison(
                level,
                pairs,
                _figures(before),
                _figures(after),
                p50,
                stats.ratio([x.p99_us for x in before], [x.p99_us for x in after]),
                stats.ratio([x.throughput for x in before], [x.throughput for x in after]),
                stats.verdict(p50, bound),
            )
        )
    return tuple(found)


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

    @property
    def measured(self) -> bool:
        return bool(self.comparisons)

    @property
    def verdict(self) -> str:
        if not self.comparisons:
            return "skipped"
        return stats.worst([c.verdict for c in self.comparisons])

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

    @property
    def refused(self) -> list[ModelLatency]:
        return [m for m in self.models if m.verdict == stats.REFUSED]

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
            "models": [m.to_json() for m in self.models],
        }


# -- the server side ------------------------------------------------------------------------------


class Server(Protocol):
    http_url: str
    grpc_url: str
    overrides: dict[str, str]
    completed: dict[str, dict]

    def model_ready(self, name: str, version: int | None) -> bool: ...
    def check_running(self, during: str) -> None: ...
    def load_config(self, name: str, config: str, versions: list[int]) -> str: ...


def instance_count(config) -> int:
    """The model's instances (its instance groups' counts; 1 without any)."""
    if config is None or not config.instance_group:
        return 1
    return max(1, sum(max(1, group.count) for group in config.instance_group))


class LatencyMeter:
    """Measures the models of `previous` (model -> its version N) as each wave's cases and drift are
    done. `configs`: each model's config as the image holds it (for the cold-start loads)."""

    def __init__(
        self,
        repo: Repository,
        server: Server,
        previous: Mapping[str, int | None],
        versions: Mapping[str, int | None],
        options: LatencyOptions,
        analyzer: PerfAnalyzer,
        configs: Mapping | None = None,
        environments: Mapping[str, str] | None = None,
    ) -> None:
        self.repo, self.server, self.options, self.analyzer = repo, server, options, analyzer
        self.previous, self.versions = dict(previous), dict(versions)
        self.configs = dict(configs or {})
        self.environments = dict(environments or {})
        self.results: list[ModelLatency] = []
        self._scratch = tempfile.TemporaryDirectory(prefix="triton-release-latency-")

    def close(self) -> None:
        self._scratch.cleanup()

    def __enter__(self) -> LatencyMeter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def after_wave(self, tested: Iterable[str], cases) -> None:
        failed = {c.case.split("/", 1)[0] for c in cases if not c.passed}
        for name in [n for n in tested if n in self.previous]:
            checkpoint()
            version, previous = self.versions.get(name) or 0, self.previous.get(name)
            why = self._not_measured(name, failed)
            self.results.append(ModelLatency(name, version, previous, note=why) if why else self.measure(name))

    def _not_measured(self, name: str, failed: set[str]) -> str:
        version, previous = self.versions.get(name), self.previous.get(name)
        if version is None:
            return "no numbered version folder"
        if previous is None:
            return f"no version before {version} in the image (a new model): nothing to compare"
        if name in failed:
            return "its golden cases failed: not measured"
        if not (self.server.model_ready(name, previous) and self.server.model_ready(name, version)):
            return f"version {previous} is not loaded beside {version} (the drift report says why)"
        return ""

    def measure(self, name: str) -> ModelLatency:
        """Warm-ups, the alternating rounds, the comparison, then the cold starts."""
        started = time.monotonic()
        version, previous = self.versions[name], self.previous[name]
        assert version is not None and previous is not None
        model = self.repo[name]
        served = self.server.completed.get(name) or {}
        load = workload(model, max_batch_size=int(served.get("max_batch_size") or 0))
        base = ModelLatency(name, version, previous, load=load)
        if not load.usable:
            return replace(base, note=f"not measured: {load.skipped}", seconds=time.monotonic() - started)
        config = self.configs.get(name) or model.config
        levels = tuple(sorted({1, instance_count(config)}))
        data = write_input_data(load, Path(self._scratch.name) / f"{name}.json")
        rounds: list[Round] = []
        note = ""
        with progress.task(f"latency {name}", total=2 + 2 * self.options.rounds, unit="rounds") as bar:
            try:
                interval = self.options.interval_ms
                for v in (previous, version):
                    rounds.append(Round(0, v, tuple(self._round(name, v, data, load, levels, interval)), interval))
                    bar.advance()
                interval = self._interval([r for r in rounds if r.index == 0])
                for first, second in stats.alternating(self.options.rounds):
                    for which in (first, second):
                        checkpoint()
                        v = previous if which == "before" else version
                        rounds.append(
                            Round(
                                len(rounds) - 1, v, tuple(self._round(name, v, data, load, levels, interval)), interval
                            )
                        )
                        bar.advance()
            except MeasurementFailed as exc:
                self.server.check_running(f"while measuring {name}'s latency")
                note = f"perf_analyzer could not drive it: {exc}"
        comparisons = compare(rounds, previous, version, self.options.max_increase) if not note else ()
        cold = self._cold_start(name, version, previous, load, config)
        warnings = cold_warnings(name, cold[0], cold[1], self.options.max_increase) if len(cold) == 2 else ()
        return replace(
            base,
            comparisons=comparisons,
            rounds=tuple(rounds),
            cold_start=cold,
            note=note,
            warnings=warnings,
            seconds=time.monotonic() - started,
        )

    def _round(
        self, name: str, version: int, data: Path, load: Workload, levels: tuple[int, ...], interval: int
    ) -> list[Level]:
        out = Path(self._scratch.name) / f"{name}-{version}.csv"
        return measure(self.analyzer, name, version, self.server.grpc_url, data, load, levels, interval, out)

    def _interval(self, warmups: list[Round]) -> int:
        """The window: the option's, longer for a model too slow to answer REQUESTS_PER_WINDOW
        requests in it (its warm-up p50 tells)."""
        slowest = max((lv.p50_us for r in warmups for lv in r.levels if lv.concurrency == 1), default=0.0)
        wanted = math.ceil(slowest * REQUESTS_PER_WINDOW / 1000)
        return int(min(MAX_INTERVAL_MS, max(self.options.interval_ms, wanted)))

    def _cold_start(self, name: str, version: int, previous: int, load: Workload, config) -> tuple[ColdStart, ...]:
        """Each version loaded alone (N, then N+1, which stays loaded), timed, then its first request."""
        from triton_release.models.golden_reader import load_case

        case = None
        first = load.cases[0].split("/", 1)[1]
        for path in self.repo[name].golden_cases:
            if Path(path).stem == first:
                case, _ = load_case(Path(path), name)
        found = []
        for v in (previous, version):
            checkpoint()
            text = drift_config(config, [v], self.environments.get(name), on_cpu=name in self.server.overrides)
            start = time.monotonic()
            why = self.server.load_config(name, text, [v])
            seconds = time.monotonic() - start
            if why:
                self.server.check_running(f"while loading {name} version {v} alone to time its cold start")
                found.append(ColdStart(v, note=f"version {v} did not load alone: {why}"))
                continue
            found.append(ColdStart(v, seconds, self._first_request(case, v) if case is not None else None))
        return tuple(found)

    def _first_request(self, case, version: int) -> float | None:
        """Milliseconds of the version's first inference, over a gRPC connection opened before it."""
        import tritonclient.grpc as grpc

        client = grpc.InferenceServerClient(self.server.grpc_url)
        try:
            client.is_server_live(client_timeout=10)  # the connection is up: only the request is timed
            inputs = []
            for tensor in case.inputs:
                sent = grpc.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
                sent.set_data_from_numpy(tensor.array())
                inputs.append(sent)
            start = time.perf_counter()
            client.infer(
                case.model,
                inputs,
                model_version=str(version),
                parameters=case.parameters or None,
                client_timeout=case.timeout,
            )
            return (time.perf_counter() - start) * 1000
        except Exception:  # the golden cases answered it; a figure missing here is noted as unknown
            return None
        finally:
            client.close()
