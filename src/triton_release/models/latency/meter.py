"""The latency gate's measuring: how it measures and its bound (`LatencyOptions`), and the
`LatencyMeter`, which drives each model given a new version through perf_analyzer in the server
that tested it, after each wave (warm-ups, the alternating rounds, a window long enough for a
slow model), then times each version's cold start. What it measures: models/latency/results.py;
the gate as a whole: models/latency/."""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from triton_release import progress
from triton_release.models.drift import drift_config
from triton_release.models.latency import stats
from triton_release.models.latency.perf_analyzer import (
    Level,
    MeasurementFailed,
    PerfAnalyzer,
    measure,
    write_input_data,
)
from triton_release.models.latency.results import (
    ColdStart,
    ModelLatency,
    Round,
    UnderLoad,
    cold_warnings,
    compare,
    settled,
)
from triton_release.models.repository import Repository
from triton_release.models.workload import Workload, workload
from triton_release.signals import checkpoint

if TYPE_CHECKING:
    from triton_release.models.config.schema import model_config_pb2
    from triton_release.models.golden.format import GoldenCase
    from triton_release.models.inference import CaseResult
    from triton_release.settings.options import Settings

DEFAULT_ROUNDS = 10  # pairs at most: each version measured at most this many times (at least MIN_PAIRS)
DEFAULT_INTERVAL_MS = 100  # one perf_analyzer window; a round is WINDOWS of them
WINDOWS = 3  # measurement windows per round: the fewest perf_analyzer gives figures for
WARMUP_MS = 50  # a warm-up round's windows (longer for a slow model)
MAX_INTERVAL_MS = 10_000
REQUESTS_PER_ROUND = 30  # a slow model's windows are made long enough for this many requests a round
REQUESTS_PER_WARMUP = 5
SERVER_LINES = 10  # the server log's last lines naming a model that failed under the load


NOT_ASKED = (
    "not measured: no max_latency_increase is set (measure_latency: true, or --measure-latency, measures "
    "and reports it without refusing)"
)


@dataclass(frozen=True, kw_only=True)
class LatencyOptions:
    """How the gate measures, and its bound (None: measured and reported, never refused).
    `measure`: perf_analyzer runs at all. From the settings only a bound or `measure_latency`
    asks for it: the default release spends nothing on a figure nobody asked for, wherever
    perf_analyzer happens to be installed (docs/latency.md, "The default")."""

    max_increase: float | None = None
    measure: bool = True
    rounds: int = DEFAULT_ROUNDS
    interval_ms: int = DEFAULT_INTERVAL_MS
    perf_analyzer: str | None = None  # the binary; None: PATH, then the action image's
    unmeasured: str = "allow"  # refuse: with a bound, a model left out of the gate refuses the release
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)  # PATH, LD_LIBRARY_PATH

    @classmethod
    def from_settings(cls, settings: Settings, env: Mapping[str, str]) -> LatencyOptions:
        return cls(
            max_increase=settings.max_latency_increase,
            measure=settings.max_latency_increase is not None or bool(settings.measure_latency),
            rounds=settings.latency_rounds,
            interval_ms=settings.latency_interval,
            perf_analyzer=settings.perf_analyzer,
            unmeasured=settings.latency_unmeasured,
            env=dict(env),
        )


@dataclass(frozen=True)
class _Drive:
    """What each of a model's rounds sends: its input data file, workload, concurrency levels, and
    its slowest golden request (seconds), which bounds how long a round may take."""

    name: str
    data: Path
    load: Workload
    levels: tuple[int, ...]
    request_s: float


# -- the server side ------------------------------------------------------------------------------


class Server(Protocol):
    http_url: str
    grpc_url: str
    overrides: dict[str, str]
    completed: dict[str, dict]

    def model_ready(self, name: str, version: int | None) -> bool: ...
    def check_running(self, during: str) -> None: ...
    def load_config(self, name: str, config: str, versions: list[int]) -> str: ...
    def logs(self) -> str: ...


def instance_count(config: model_config_pb2.ModelConfig | None) -> int:
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

    def __exit__(self, *exc: object) -> None:
        self.close()

    def after_wave(self, tested: Iterable[str], cases: Iterable[CaseResult]) -> None:
        failed = {c.case.split("/", 1)[0] for c in cases if not c.passed}
        slowest: dict[str, float] = {}  # model -> its slowest golden request, in seconds
        for c in cases:
            model = c.case.split("/", 1)[0]
            slowest[model] = max(slowest.get(model, 0.0), float(getattr(c, "latency_ms", 0.0) or 0.0) / 1000)
        found = []
        for name in [n for n in tested if n in self.previous]:
            checkpoint()
            version, previous = self.versions.get(name) or 0, self.previous.get(name)
            why = self._not_measured(name, failed)
            found.append(
                ModelLatency(name, version, previous, note=why) if why else self.measure(name, slowest.get(name, 0))
            )
        # The cold starts last: loading a model alone (an ensemble with the models it runs) would
        # unload the version before of the other models of the wave, still to be measured.
        self.results.extend(self.cold_start(m) for m in found)

    def _not_measured(self, name: str, failed: set[str]) -> str:
        version, previous = self.versions.get(name), self.previous.get(name)
        if version is None:
            return "no numbered version folder"
        if previous is None:
            return f"no version before {version} in the image (a new model): nothing to compare"
        if name in failed:
            return "its golden cases failed"
        if not (self.server.model_ready(name, previous) and self.server.model_ready(name, version)):
            # another model's load since drift (an ensemble loads its steps as the repository has them,
            # the newest version alone) may have unloaded N: loaded beside N+1 again, as drift does
            config = self.configs.get(name) or self.repo[name].config
            text = drift_config(
                config, [previous, version], self.environments.get(name), on_cpu=name in self.server.overrides
            )
            why = self.server.load_config(name, text, [previous, version])
            if why:
                self.server.check_running(f"while loading {name} versions {previous} and {version} to measure them")
                return f"version {previous} did not load beside {version}: {why}"
        return ""

    def measure(self, name: str, request_s: float = 0.0) -> ModelLatency:
        """Warm-ups, the alternating rounds and the comparison (the cold starts come once the wave's
        models are measured: `cold_start`). `request_s`: the model's slowest golden request (a round
        taking far longer than its windows and requests is a hang). A version that crashes, hangs
        or errors under the load ends its measuring (`_failed`); its cold starts are not timed."""
        started = time.monotonic()
        version, previous = self.versions[name], self.previous[name]
        assert version is not None and previous is not None
        model = self.repo[name]
        served = self.server.completed.get(name) or {}
        load = workload(model, max_batch_size=int(served.get("max_batch_size") or 0))
        base = ModelLatency(name, version, previous, load=load)
        if not load.usable:
            return replace(base, note=load.skipped, seconds=time.monotonic() - started)
        config = self.configs.get(name) or model.config
        levels = tuple(sorted({1, instance_count(config)}))
        data = write_input_data(load, Path(self._scratch.name) / f"{name}.json")
        drive = _Drive(name, data, load, levels, request_s)
        rounds: list[Round] = []
        note, failure, early = "", None, None
        pairs, bound = self.options.rounds, self.options.max_increase
        with progress.task(f"latency {name}", total=2 + 2 * pairs, unit="rounds") as bar:
            running = previous
            try:
                interval = self._warmup_interval(request_s)
                for running in (previous, version):
                    figures, used = self._round(drive, running, interval)
                    rounds.append(Round(0, running, tuple(figures), used, WINDOWS))
                    bar.advance()
                interval = self._interval([r for r in rounds if r.index == 0])
                confidence = stats.early_confidence(pairs)
                for pair, (first, second) in enumerate(stats.alternating(pairs), 1):
                    for which in (first, second):
                        checkpoint()
                        running = previous if which == "before" else version
                        figures, used = self._round(drive, running, interval)
                        rounds.append(Round(len(rounds) - 1, running, tuple(figures), used, WINDOWS))
                        bar.advance()
                    if stats.MIN_PAIRS <= pair < pairs and settled(rounds, previous, version, bound, confidence):
                        early = confidence  # decided: the remaining pairs could not change the verdict
                        break
            except MeasurementFailed as exc:
                self.server.check_running(f"while measuring {name}'s latency")
                note, failure = self._failed(drive, running, exc)
        comparisons = compare(rounds, previous, version, bound, early) if not note else ()
        return replace(
            base,
            comparisons=comparisons,
            rounds=tuple(rounds),
            note=note,
            seconds=time.monotonic() - started,
            under_load=failure,
        )

    def cold_start(self, found: ModelLatency) -> ModelLatency:
        """`found` with its versions' cold starts and their warnings, when it was driven and no
        version failed under the load (a hung one would hold its unload)."""
        if found.load is None or not found.load.usable or found.under_load is not None or found.previous is None:
            return found
        started = time.monotonic()
        config = self.configs.get(found.model) or self.repo[found.model].config
        cold = self._cold_start(found.model, found.version, found.previous, found.load, config)
        warnings = cold_warnings(found.model, cold[0], cold[1], self.options.max_increase) if len(cold) == 2 else ()
        return replace(found, cold_start=cold, warnings=warnings, seconds=found.seconds + time.monotonic() - started)

    def _round(self, drive: _Drive, version: int, interval: int, windows: int = WINDOWS) -> tuple[list[Level], int]:
        """One round's figures and the window they were measured with: a window no request finished
        in (a stall of the runner longer than a short window) is tried again twice as long, up to
        MAX_INTERVAL_MS; anything else perf_analyzer says ends the measuring (`_failed`)."""
        while True:
            try:
                return self._measure(drive, version, interval, windows), interval
            except MeasurementFailed as exc:
                if not exc.too_short or interval >= MAX_INTERVAL_MS:
                    raise
                interval = min(MAX_INTERVAL_MS, 2 * interval)

    def _measure(self, drive: _Drive, version: int, interval: int, windows: int) -> list[Level]:
        out = Path(self._scratch.name) / f"{drive.name}-{version}.csv"
        return measure(
            self.analyzer,
            drive.name,
            version,
            self.server.grpc_url,
            drive.data,
            drive.load,
            drive.levels,
            interval,
            out,
            request_s=drive.request_s,
            windows=windows,
        )

    def _failed(self, drive: _Drive, running: int, exc: MeasurementFailed) -> tuple[str, UnderLoad | None]:
        """What a failed round means, as (the note, the version that failed under the load).

        perf_analyzer failing on its own (nothing reached the model): the model is not gated. The
        new version crashing, hanging or erroring: a regression in itself. The version before doing
        so: the new one is driven for one round; if it fails too, that is its own failure, else
        there is nothing to compare it with, and it is not gated."""
        name = drive.name
        version = self.versions[name]
        assert version is not None
        if not exc.under_load:
            return f"perf_analyzer could not drive version {running}: {exc}", None
        found = UnderLoad(running, exc.under_load, str(exc), self._server_lines(name))
        if running == version:
            return found.shown(), found
        try:
            self._round(drive, version, self.options.interval_ms)
        except MeasurementFailed as again:
            if again.under_load:
                after = UnderLoad(version, again.under_load, str(again), self._server_lines(name))
                return after.shown(), after
            return f"{found.shown()}; perf_analyzer could not drive version {version} either: {again}", found
        return f"{found.shown()}, and version {version} held that load: nothing to compare it with", found

    def _server_lines(self, name: str) -> tuple[str, ...]:
        """The server log's last SERVER_LINES lines naming the model (its instances: `name_0`)."""
        marks = (f"'{name}'", f"'{name}_", f'"{name}"', f"/models/{name}/", f"model {name} ")
        lines = [line.strip()[:300] for line in self.server.logs().splitlines() if any(m in line for m in marks)]
        return tuple(lines[-SERVER_LINES:])

    def _interval(self, warmups: list[Round]) -> int:
        """The window: the option's, longer for a model too slow to answer REQUESTS_PER_ROUND
        requests in a round of WINDOWS of them (its warm-up p50 tells)."""
        slowest = max((lv.p50_us for r in warmups for lv in r.levels if lv.concurrency == 1), default=0.0)
        wanted = math.ceil(slowest * REQUESTS_PER_ROUND / WINDOWS / 1000)
        return int(min(MAX_INTERVAL_MS, max(self.options.interval_ms, wanted)))

    @staticmethod
    def _warmup_interval(request_s: float) -> int:
        """A warm-up's windows: WARMUP_MS, longer for a model whose slowest golden request would not
        fit REQUESTS_PER_WARMUP times in one."""
        wanted = math.ceil(request_s * 1000 * REQUESTS_PER_WARMUP)
        return int(min(MAX_INTERVAL_MS, max(WARMUP_MS, wanted)))

    def _cold_start(
        self, name: str, version: int, previous: int, load: Workload, config: model_config_pb2.ModelConfig | None
    ) -> tuple[ColdStart, ...]:
        """Each version loaded alone (N, then N+1, which stays loaded), timed, then its first request."""
        from triton_release.models.golden.reader import load_case

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

    def _first_request(self, case: GoldenCase, version: int) -> float | None:
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
