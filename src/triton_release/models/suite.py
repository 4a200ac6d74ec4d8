"""A golden suite: the cases of some models, run as pytest items through the project's plugin
against a running server, collected into one typed `GoldenRun`.

More models than `max_loaded` (the wave size) are tested in waves, one server throughout: each
wave's models are loaded, its cases run, and its models unloaded once they ran. The next wave's
models load beside the current wave's cases, as many as the container has room for
(server/memory.py's `room_beside`), the rest after them. An ensemble and the models it needs always
share a wave.

Without GPUs, a model whose config asks for one is loaded with its config for the CPU
(`cpu_overrides`), after which the models that need it load (`deferred`); one that still fails
to load is reported as needing a GPU, with the models that need it, and its cases are not run.
"""

from __future__ import annotations

import contextvars
import logging
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from triton_release import progress
from triton_release.errors import Interrupted, Refused, UsageError
from triton_release.models import golden
from triton_release.models.devices import cpu_override, needs_gpu
from triton_release.models.graph import needed
from triton_release.models.inference import CaseResult
from triton_release.models.repository import GOLDEN_DIR, Repository
from triton_release.signals import pending_interrupt

if TYPE_CHECKING:
    import pytest

    from triton_release.models.drift import ModelDrift
    from triton_release.models.latency import LatencyRun


class Server(Protocol):
    """What the waves need of a running server (server/container.py's TritonServer)."""

    http_url: str
    grpc_url: str
    unloadable: dict[str, str]
    wave: str  # "wave 2 of 3" while a wave loads, shown with the progress ("" for a single wave)

    loaded: dict[str, int | None]  # the models loaded now, at their versions

    def switch_to(self, models: dict[str, int | None]) -> None: ...
    def load(self, models: dict[str, int | None], *, sample: bool = True) -> None: ...
    def read_configs(self, names: list[str]) -> None: ...
    def sample_memory(self, last: bool = False) -> int | None: ...
    def room_for_next_wave(self, loaded: int, wanted: int) -> int: ...


log = logging.getLogger("triton_release")


@dataclass(frozen=True)
class Wave:
    """Models loaded together, and the tested ones among them (whose cases run in this wave)."""

    index: int  # from 1
    load: tuple[str, ...]
    tested: tuple[str, ...]
    oversized: bool = False  # one ensemble needs more than max_loaded models: loaded together all the same


@dataclass(frozen=True)
class WaveRun:
    index: int
    loaded: tuple[str, ...]
    tested: tuple[str, ...]
    cases: int
    seconds: float
    oversized: bool = False

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "loaded": list(self.loaded),
            "tested": list(self.tested),
            "cases": self.cases,
            "seconds": round(self.seconds, 3),
            "oversized": self.oversized,
        }


# Where the test step's time goes, in the order a run passes them (summed over its waves):
PHASES = (
    "prepare",  # before the server: the image's labels and configs, the case files, perf_analyzer
    "server_start",  # the container's start until tritonserver answers, less the load below
    "load",  # the models' loads: the start's (from the server's log) and every later wave's
    "golden_cases",  # the cases' requests, through the pytest plugin
    "drift_load",  # previous versions reloaded beside the new ones after their cases (models/drift.py);
    # those paired from the first load are in "load"
    "drift",  # the previous versions' answers to the golden inputs, compared
    "latency",  # the latency gate (models/latency/)
    "memory",  # the server's memory, read from the daemon after each wave
    "server_stop",  # the container's removal
)


class Phases:
    """The test step's clock: seconds by phase (PHASES), each summed over the times it ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def move(self, source: str, dest: str, seconds: float) -> None:
        """Count `seconds` of `source`'s time as `dest`'s (a finer split, found afterwards)."""
        seconds = max(0.0, min(seconds, self.seconds.get(source, 0.0)))
        self.add(source, -seconds)
        self.add(dest, seconds)

    def frozen(self) -> tuple[tuple[str, float], ...]:
        return tuple((name, self.seconds[name]) for name in PHASES if name in self.seconds)


@dataclass(frozen=True)
class GoldenRun:
    image: str
    loaded: tuple[str, ...]
    cases: tuple[CaseResult, ...]
    untested: tuple[str, ...]  # models without golden cases
    waves: tuple[WaveRun, ...] = ()
    peak_memory_bytes: int | None = None  # the server container's; None where the daemon did not say
    on_cpu: tuple[str, ...] = ()  # KIND_GPU models loaded (and tested) on the CPU
    needs_gpu: tuple[tuple[str, str], ...] = ()  # (model, why): not tested, they did not load on the CPU
    completed: tuple[tuple[str, dict], ...] = ()  # auto-complete models: (model, its config as served)
    drift: tuple[ModelDrift, ...] = ()  # new versions against their previous one (models/drift.py)
    latency: LatencyRun | None = None  # their latency against the previous one's (models/latency/)
    phases: tuple[tuple[str, float], ...] = ()  # (phase, seconds) in PHASES' order: where the time went

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    @property
    def failed(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    def to_json(self) -> dict:
        return {
            "image": self.image,
            "loaded": list(self.loaded),
            "passed": self.passed,
            "cases": [c.to_json() for c in self.cases],
            "models_without_golden_cases": list(self.untested),
            "waves": [w.to_json() for w in self.waves],
            "peak_memory_bytes": self.peak_memory_bytes,
            "tested_on_cpu": list(self.on_cpu),
            "not_tested_needs_gpu": dict(self.needs_gpu),
            "auto_completed": sorted(name for name, _ in self.completed),
            "drift": [d.to_json() for d in self.drift],
            "latency": self.latency.to_json() if self.latency is not None else None,
            "phases": {name: round(seconds, 3) for name, seconds in self.phases},
        }


def models_to_load(repo: Repository, names: list[str]) -> dict[str, int | None]:
    """The models to test plus every model they need (an ensemble's steps), newest versions."""
    repo.require(names)
    wanted = needed(names, repo.needs())
    absent = sorted(n for n in wanted if n not in repo)
    if absent:
        raise Refused(
            f"model {absent[0]!r}, which {', '.join(names)} need, is not in {repo.root}; run `triton-release validate`."
        )
    return {n: repo[n].newest_version for n in sorted(wanted)}


def cpu_overrides(
    repo: Repository, names: Iterable[str], environments: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The models among `names` with a KIND_GPU instance group -> the config they load with on a
    machine without GPUs (the load's `config` parameter). `environments`: model -> its environment's
    path in the image, which the image's config.pbtxt names and so must the override."""
    environments = environments or {}
    return {
        name: cpu_override(repo[name].config, environments.get(name))
        for name in sorted(names)
        if needs_gpu(repo[name].config)
    }


def deferred(repo: Repository, names: Iterable[str], overridden: Iterable[str]) -> dict[str, set[str]]:
    """The models among `names` that need an overridden model (an ensemble's step, a BLS callee) ->
    those models: loaded after them, since loading an ensemble makes Triton load its steps from
    their files, where they ask for a GPU."""
    needs, overridden = repo.needs(), set(overridden)
    found = {name: (needed([name], needs) - {name}) & overridden for name in names if name not in overridden}
    return {name: wanted for name, wanted in sorted(found.items()) if wanted}


def plan_waves(repo: Repository, names: list[str], max_loaded: int) -> list[Wave]:
    """The waves that test `names` with at most `max_loaded` models loaded at once; one wave when
    everything fits.

    Each tested model comes with what it needs (an ensemble with its steps, `models.graph`): its
    group, never split. A group inside another's goes with it; the others are packed first-fit in
    name order, so the same names always make the same waves. A group bigger than `max_loaded` is
    a wave of its own, marked `oversized`. Each model is tested in the first wave holding its group.
    """
    if max_loaded < 1:
        raise ValueError(f"max_loaded {max_loaded!r}: at least 1 model must be loaded to test")
    needs = repo.needs()
    tested = sorted(set(names))
    groups = {name: frozenset(needed([name], needs)) for name in tested}
    everything = frozenset().union(*groups.values())
    if len(everything) <= max_loaded:
        return [Wave(1, tuple(sorted(everything)), tuple(tested))]
    packed: list[set[str]] = []
    for group in dict.fromkeys(g for g in groups.values() if not any(g < other for other in groups.values())):
        for wave in packed:
            if group <= wave or len(wave | group) <= max_loaded:
                wave |= group
                break
        else:
            packed.append(set(group))
    first = {name: next(i for i, wave in enumerate(packed) if group <= wave) for name, group in groups.items()}
    return [
        Wave(i + 1, tuple(sorted(wave)), tuple(n for n in tested if first[n] == i), len(wave) > max_loaded)
        for i, wave in enumerate(packed)
    ]


def wave_label(index: int, count: int) -> str:
    """How wave `index` of `count` is shown with the progress of its loads and cases: "wave 2 of 3",
    "" when there is only one."""
    return f"wave {index} of {count}" if count > 1 else ""


def load_cases(repo: Repository, names: list[str]) -> list[golden.GoldenCase]:
    """Every case of `names`, all well-formed, before any server starts."""
    repo.require(names)
    cases: list[golden.GoldenCase] = []
    for name in names:
        for path in repo[name].golden_cases:
            case, problems = golden.load_case(path, name)
            if problems:
                raise Refused(f"{problems[0]}. Fix the golden file (run `triton-release validate` to see all).")
            assert case is not None
            cases.append(case)
    return cases


class _Loaded:
    """Hands the plugin the repository already loaded, which it would otherwise load again."""

    def __init__(self, repo: Repository) -> None:
        self.repo = repo

    def pytest_configure(self, config: pytest.Config) -> None:
        from triton_release.models.pytest_plugin import use_repository

        use_repository(config, self.repo)


class _Collector:
    """Collects each golden item's CaseResult as pytest runs it, advancing `bar` by one for each."""

    def __init__(self, bar: progress.Task | None = None) -> None:
        self.cases: list[CaseResult] = []
        self.bar = bar

    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> None:
        if call.when != "call":
            return
        result = getattr(item, "result", None)
        if result is None:  # the item failed before it got an answer
            result = CaseResult(
                item.name, str(item.path), False, 0.0, (), str(call.excinfo.value) if call.excinfo else "no answer"
            )
        self.cases.append(result)
        if self.bar is not None:
            self.bar.advance()


def run_suite(
    repo: Repository,
    names: list[str],
    http_url: str,
    grpc_url: str,
    *,
    junitxml: str | None = None,
    keyword: str | None = None,
    bar: progress.Task | None = None,
) -> list[CaseResult]:
    """pytest in-process with the plugin: one item per golden case, `<model>/<case>`; each case
    run advances `bar`. Only the golden folders of `names` are collected; with none of them
    holding a case, pytest does not run (`junitxml` is written empty)."""
    import pytest

    collector = _Collector(bar)
    root = str(repo.root.resolve())
    # only the tested models' golden folders are collected, never the repository's root: the
    # folders of a thousand models outside the wave are not even walked
    folders = [str(Path(root, name, GOLDEN_DIR)) for name in names if name in repo and repo[name].golden_cases]
    if not folders:  # no case to run: no pytest session either
        if junitxml:
            merge_junit([], junitxml)
        return []
    with tempfile.TemporaryDirectory() as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        args = [
            *folders,
            "--triton-url",
            http_url,
            "--triton-grpc-url",
            grpc_url,
            "--model-repository",
            root,
            "--triton-models",
            ",".join(names),
            "-c",
            str(ini),
            "--rootdir",
            root,
            "--noconftest",
            # only the plugins named here: the environment's own (xdist, ...) cost a first run a
            # quarter of a second to load, and have no say in a golden run
            "--disable-plugin-autoload",
            "-p",
            "triton_release.models.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:terminal",
            # the cases print nothing: capturing sys.stdout/stderr is enough, without the temporary
            # file and the dup2 of the descriptors that fd capture sets up around every case
            "--capture=sys",
        ]
        if junitxml:
            args += ["--junitxml", str(Path(junitxml).resolve())]
        if keyword:
            args += ["-k", keyword]
        code = pytest.main(args, plugins=[collector, _Loaded(repo)])
    # pytest caught the signal, or its own unraisable hook (ours is set aside while it runs) took
    # one whose raise landed in a finalizer: either way a signal came, and the run stops
    if code == pytest.ExitCode.INTERRUPTED or pending_interrupt() is not None:
        raise pending_interrupt() or Interrupted("SIGINT", 130)
    if code == pytest.ExitCode.USAGE_ERROR:
        raise UsageError(f"pytest refused the golden run's arguments (is -k {keyword!r} a valid expression?).")
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise Refused(
            f"pytest could not run the golden cases of {repo.root} (exit {int(code)}); "
            f"check -k and the golden files (`triton-release validate`)."
        )
    return collector.cases


def run_waves(
    repo: Repository,
    server: Server,
    waves: list[Wave],
    versions: dict[str, int | None],
    *,
    junitxml: str | None = None,
    keyword: str | None = None,
    started: float | None = None,
    after_wave: Callable[[list[str], list[CaseResult]], None] | None = None,
    phases: Phases | None = None,
) -> tuple[list[CaseResult], list[WaveRun]]:
    """Every wave's cases against `server`, which has the first wave loaded: each later wave is
    switched in (the models of the one before unloaded, its own loaded at `versions`). A later
    wave's loads begin beside the cases of the wave before, as many as the server has room for
    (`room_for_next_wave`, `part_beside`), the rest after them; never with `after_wave`, whose
    measures take a wave alone. Every wave runs whatever the cases of the others answered; a model that fails to load refuses at once,
    except one the server set aside as needing a GPU, whose cases are not run.
    `started`: when the server was started, counted in the first wave's time. `after_wave`: called
    with the wave's tested models and their results while they are still loaded (drift).
    Progress: "golden cases: k of n cases" over every wave (n unknown with `keyword`; a model set
    aside as needing a GPU takes its cases out of n), with the wave when there are several, which
    the server's loads show too (`server.wave`)."""
    for wave in waves:
        if wave.oversized:
            log.warning(
                f"wave {wave.index} loads {len(wave.load)} models ({', '.join(wave.load)}), more than "
                "max_loaded: an ensemble and the models it needs are always loaded together"
            )
    phases = phases or Phases()
    cases: list[CaseResult] = []
    ran: list[WaveRun] = []
    counts = {name: len(repo[name].golden_cases) for wave in waves for name in wave.tested}  # a file, a case
    total = None if keyword else sum(counts.values())
    with (
        progress.task("golden cases", total=total, unit="cases") as bar,
        tempfile.TemporaryDirectory(prefix="triton-release-waves-") as tmp,
    ):
        parts = []
        beside: Beside | None = None  # the next wave's loads, begun beside this wave's cases
        for wave, following in zip(waves, [*waves[1:], None], strict=True):
            start = started if wave.index == 1 and started is not None else time.monotonic()
            server.wave = wave_label(wave.index, len(waves))
            if server.wave:
                bar.update(detail=server.wave)
            with phases.timed("load"):
                if beside is not None:  # its models loaded, or its refusal raised here
                    beside.wait()
                    beside = None
                server.switch_to({name: versions[name] for name in wave.load})
            tested = [name for name in wave.tested if name not in server.unloadable]
            aside = sum(counts.get(name, 0) for name in wave.tested if name in server.unloadable)
            if aside and total is not None:
                total -= aside  # set aside as needing a GPU: their cases do not run
                bar.update(total=total)
            with phases.timed("load"):  # the auto-complete models' configs, as served
                server.read_configs([name for name in tested if repo[name].config is None])
            # drift and latency (after_wave) measure the wave's models with nothing loading beside
            if following is not None and after_wave is None:
                ahead = {name: versions[name] for name in following.load if name not in server.loaded}
                with phases.timed("memory"):
                    room = server.room_for_next_wave(len(server.loaded), len(ahead)) if ahead else 0
                if room:  # as many as there is room for; the rest load after the cases
                    server.wave = wave_label(following.index, len(waves))
                    beside = Beside(partial(server.load, part_beside(repo, ahead, room), sample=False))
            part = junitxml
            if junitxml and len(waves) > 1:
                part = str(Path(tmp) / f"wave-{wave.index}.xml")
                parts.append(part)
            with phases.timed("golden_cases"):
                found = (
                    run_suite(repo, tested, server.http_url, server.grpc_url, junitxml=part, keyword=keyword, bar=bar)
                    if tested
                    else []
                )
            if after_wave is not None:
                after_wave(tested, found)
            with phases.timed("memory"):
                server.sample_memory(last=wave is waves[-1])
            cases += found
            loaded = tuple(name for name in wave.load if name not in server.unloadable)
            ran.append(WaveRun(wave.index, loaded, tuple(tested), len(found), time.monotonic() - start, wave.oversized))
        if parts and junitxml:
            merge_junit(parts, junitxml)
    return cases, ran


def part_beside(repo: Repository, ahead: dict[str, int | None], room: int) -> dict[str, int | None]:
    """The models of `ahead` (the next wave's, not loaded yet) that load beside the cases when
    there is room for `room` of them: all that fit, in name order, each with what it needs among
    `ahead` (an ensemble with its steps, a model with the CPU config of one it needs: never a
    model whose need Triton would load from its files), or none of them."""
    if room >= len(ahead):
        return dict(ahead)
    needs = repo.needs()
    chosen: set[str] = set()
    for name in ahead:
        group = (needed([name], needs) & ahead.keys()) | {name}
        if len(chosen | group) <= room:
            chosen |= group
    return {name: version for name, version in ahead.items() if name in chosen}


class Beside:
    """The next wave's loads, in a thread of their own while the current wave's cases run: its
    progress goes where the step's goes (the thread runs in a copy of the step's context), and
    its failure is raised where `wait` is called. A daemon thread: a run stopped meanwhile removes
    the server, which ends the thread's wait (its check that the server runs fails)."""

    def __init__(self, load: Callable[[], None]) -> None:
        self._failure: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run, load), name="triton-next-wave", daemon=True
        )
        self._thread.start()

    def _run(self, load: Callable[[], None]) -> None:
        try:
            load()
        except BaseException as exc:  # raised again in the waves' own thread
            self._failure = exc

    def wait(self) -> None:
        self._thread.join()
        if self._failure is not None:
            raise self._failure


def merge_junit(parts: list[str], dest: str) -> None:
    """The JUnit XML files of several pytest runs as one: their test cases in one test suite, the
    counts and times summed."""
    merged = None
    for part in parts:
        if not Path(part).exists():
            continue
        root = ElementTree.parse(part).getroot()
        for suite in [root] if root.tag == "testsuite" else root.iter("testsuite"):
            if merged is None:
                merged = suite
                continue
            for count in ("tests", "errors", "failures", "skipped"):
                merged.set(count, str(int(merged.get(count, "0")) + int(suite.get(count, "0"))))
            merged.set("time", f"{float(merged.get('time', '0')) + float(suite.get('time', '0')):.3f}")
            merged.extend(child for child in suite if child.tag == "testcase")
    top = ElementTree.Element("testsuites")
    if merged is not None:
        top.append(merged)
    path = Path(dest).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(top).write(path, encoding="utf-8", xml_declaration=True)
