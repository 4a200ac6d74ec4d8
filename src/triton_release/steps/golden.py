"""Test, record: the golden cases run against an image (with the drift and latency gates), the
image signed with its served signatures, and golden outputs recorded."""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.contract import ENVIRONMENTS_LABEL, MODELS_LABEL, SIGNATURES_LABEL, VERSION_LABEL
from triton_release.errors import InfrastructureError, Refused
from triton_release.files import write_atomic
from triton_release.history import releases
from triton_release.models.gates import NO_GATES, GateOptions
from triton_release.models.repository import Repository
from triton_release.settings import ServerOptions

DEFAULT_SERVER = ServerOptions()

if TYPE_CHECKING:
    import docker

    from triton_release.history.planned import ChangesResult
    from triton_release.models.config.schema import model_config_pb2
    from triton_release.models.latency import LatencyMeter, LatencyOptions, LatencyRun
    from triton_release.models.latency.perf_analyzer import PerfAnalyzer
    from triton_release.models.suite import GoldenRun
    from triton_release.server.container import TritonServer


# -- test, record -----------------------------------------------------------------------------


def test(
    root: Path | Repository,
    image: str,
    names: list[str],
    *,
    server_options: ServerOptions = DEFAULT_SERVER,
    junitxml: str | None = None,
    keyword: str | None = None,
    shown_as: Path | None = None,
    new_versions: tuple[str, ...] = (),
    drift_unmeasurable: Mapping[str, str] | None = None,
    gates: GateOptions = NO_GATES,
    built_here: bool = False,
    removed_beside: bool = False,
) -> GoldenRun:
    """Serve `image` with the models (and what they need) loaded, as `server_options` say; run their
    golden cases. More than its `max_loaded` models are tested in waves, in the same server.
    `shown_as`: the model repository the user knows, when `root` is an export of it: the cases'
    files are named as they are there. Without `gpus`, KIND_GPU models are loaded on the CPU, and
    one that fails there is reported untested (`gpu_models` "test") or refused ("require").
    `new_versions`: models with a new version, whose golden inputs are also sent to their previous
    version once their cases passed (models/drift.py); a drift above the gates' `max_drift`
    refuses, after the golden cases; `drift_unmeasurable`: model -> why its drift cannot be
    measured in this image (reported so, never as 0). With the gates' `latency`, those models' new
    and previous versions are then measured with perf_analyzer (models/latency/); a slowdown
    beyond its bound refuses. The run's `phases` say where the step's time went (models/suite.py's
    PHASES). `built_here`: this run built `image` from `root`, each version folder a layer addressed
    by its content, so their model files are read from `root` (the configs from the image still);
    the release checks after the tests that `root` still holds what was built (still_in_place).
    `removed_beside`: the server is removed in a thread once the cases are done, while the caller
    goes on; it waits for that (processes.wait_removed) before it ends."""
    import contextlib
    import time

    from triton_release.image.engine import docker_client, require_local_image
    from triton_release.models.config.completion import image_held
    from triton_release.models.devices import image_cpu_overrides
    from triton_release.models.drift import DriftMeter, previous_version, side_by_side
    from triton_release.models.suite import (
        GoldenRun,
        Phases,
        deferred,
        load_cases,
        models_to_load,
        plan_waves,
        run_waves,
        wave_label,
    )
    from triton_release.server.container import TritonServer

    phases, begun = Phases(), time.monotonic()
    max_drift, latency = gates.max_drift, gates.latency
    repo = root if isinstance(root, Repository) else Repository.load(root)
    repo.require(names)
    client = docker_client()
    require_local_image(client, image)
    shipped = _image_models(client, image)  # the image is the truth: the versions it holds
    load = {
        name: max(shipped[name]) if shipped.get(name) else version
        for name, version in models_to_load(repo, names).items()
    }
    load_cases(repo, names)  # every case file well-formed before any server starts
    waves = plan_waves(repo, names, server_options.max_loaded)
    environments = _image_environments(client, image)
    # the image's configs, not the checkout's: what ships (`warmup: golden` wrote model_warmup there)
    held, completing = image_held(
        client, image, {name: shipped.get(name, ()) for name in load}, built_from=repo.root if built_here else None
    )
    overrides = {} if server_options.gpus else image_cpu_overrides(repo, held, environments)
    every = len(waves) == 1 and set(load) == set(repo.models) and not overrides
    previous = {
        name: previous_version(shipped.get(name) or repo[name].versions, load[name])
        for name in new_versions
        if name in load and name in names
    }
    compared = [n for n, v in previous.items() if v is not None]
    analyzer, latency_note = perf_analyzer_for(latency, compared)
    configs = {name: held[name] for name in compared}
    paired = side_by_side(
        repo,
        previous,
        load,
        environments=environments,
        on_cpu=overrides,
        unmeasurable=drift_unmeasurable,
        configs=configs,
    )
    started = time.monotonic()
    phases.add("prepare", started - begun)
    server = TritonServer.started_as(
        server_options,
        image,
        {m: load[m] for m in waves[0].load},
        all_models=every and completing is not None,  # `*` would load a folder nobody read
        client=client,
        overrides=overrides,
        deferred=deferred(repo, load, overrides),
        paired=paired,
        auto_complete=completing is not None,
        removed_beside=removed_beside,
    )
    server.wave = wave_label(1, len(waves))  # wave 1 loads as the server starts
    with contextlib.ExitStack() as stack:
        with phases.timed("server_start"):
            stack.enter_context(server)
        phases.move("server_start", "load", server.start_load_seconds or 0.0)  # what its log shows of it
        with phases.timed("latency") if analyzer is not None else contextlib.nullcontext():  # a gate to set up
            timing = stack.enter_context(
                _latency_meter(repo, server, previous, load, latency, analyzer, configs, environments)
            )
        meter = DriftMeter(repo, server, previous, load, environments, drift_unmeasurable) if previous else None

        def after_wave(tested: list[str], found: list) -> None:
            assert meter is not None
            with phases.timed("drift"):
                meter.after_wave(tested, found)
            if timing is not None:  # after drift: both versions are loaded side by side
                with phases.timed("latency"):
                    timing.after_wave(tested, found)

        cases, ran = run_waves(
            repo,
            server,
            waves,
            load,
            junitxml=junitxml,
            keyword=keyword,
            started=started,
            after_wave=after_wave if meter else None,
            phases=phases,
        )
        if any(not c.passed for c in cases):  # a server the daemon killed is no model's fault
            server.check_running("while its golden cases ran")
        with phases.timed("server_stop"):
            stack.close()
    if meter is not None:
        phases.move("drift", "drift_load", meter.load_seconds)
    if shown_as is not None:
        cases = [replace(c, path=str(_shown(Path(c.path), repo.root, shown_as))) for c in cases]
    run = GoldenRun(
        image,
        tuple(load),
        tuple(cases),
        tuple(n for n in names if not repo[n].golden_cases),
        tuple(ran),
        server.peak_memory,
        tuple(sorted(server.on_cpu)),
        tuple((n, server.unloadable[n]) for n in sorted(names) if n in server.unloadable),
        tuple(sorted(server.completed.items())),
        tuple(meter.results) if meter else (),
        _latency_run(latency, analyzer, latency_note, timing),
        phases=phases.frozen(),
    )
    if not run.passed:
        failed = run.failed
        raise Refused(
            f"""
            {len(failed)} of {len(run.cases)} golden cases failed in {image} (first: {failed[0].path}:
            {failed[0].message}). Fix the model or, if the new answer is right, the golden file.""",
            result=run,
        )
    if max_drift is not None:
        check_drift(run, max_drift)
    if run.latency is not None and run.latency.bound is not None:
        check_latency(run, run.latency.bound)
    return run


def perf_analyzer_for(options: LatencyOptions | None, measurable: list[str]) -> tuple[PerfAnalyzer | None, str]:
    """perf_analyzer for the latency gate, and a note when it does not run: nothing to compare (a
    first release), not asked for (no bound, no `measure_latency`: never run, even where it is
    installed), or perf_analyzer missing while only measuring. A bound installs it on first use
    (into the cache); missing even then is an infrastructure failure (exit 3), before any server
    starts."""
    if options is None:
        return None, ""
    if not measurable:
        return None, (
            "no model has a version before its new one (a first release, or only new models): no latency to compare"
            if options.max_increase is not None
            else ""
        )
    if not options.measure:
        from triton_release.models.latency.meter import NOT_ASKED

        return None, NOT_ASKED
    from triton_release.models.latency.perf_analyzer import PerfAnalyzerMissing, find

    try:
        return find(options.perf_analyzer, options.env, install_missing=options.max_increase is not None), ""
    except PerfAnalyzerMissing as exc:
        if options.max_increase is None:
            return None, f"latency not measured: {exc}"
        raise InfrastructureError(
            f"--max-latency-increase {options.max_increase:g} asks for the latency gate, and {exc}"
        ) from None


def _latency_meter(
    repo: Repository,
    server: TritonServer,
    previous: Mapping[str, int | None],
    load: Mapping[str, int | None],
    options: LatencyOptions | None,
    analyzer: PerfAnalyzer | None,
    configs: Mapping[str, model_config_pb2.ModelConfig | None],
    environments: Mapping[str, str],
) -> AbstractContextManager[LatencyMeter | None]:
    """The latency meter of the models with a version before (a context: its scratch folder is
    removed), or a null context when nothing is measured."""
    import contextlib

    if options is None or analyzer is None:
        return contextlib.nullcontext()
    from triton_release.models.latency import LatencyMeter

    return LatencyMeter(repo, server, previous, load, options, analyzer, configs, environments)


def _latency_run(
    options: LatencyOptions | None, analyzer: PerfAnalyzer | None, note: str, timing: LatencyMeter | None
) -> LatencyRun | None:
    if options is None:
        return None
    from triton_release.models.latency import LatencyRun

    return LatencyRun(
        options.max_increase,
        options.rounds,
        options.interval_ms,
        analyzer,
        note,
        tuple(timing.results) if timing is not None else (),
        options.unmeasured,
        options.measure,
    )


def check_latency(run: GoldenRun, bound: float) -> None:
    """Refuse a new version that crashed, hung or errored under the gate's load; then one whose p50
    latency interval lies wholly above 1 + `bound` of its previous version's (models/latency/),
    naming both versions' figures; then, with `latency_unmeasured: refuse`, any model the gate left
    out."""
    assert run.latency is not None
    _check_under_load(run, bound)
    found = run.latency.refused
    if not found:
        _check_unmeasured(run, bound)
        return
    first = found[0]
    compared = first.deciding
    assert compared is not None
    others = f" (and {', '.join(m.model for m in found[1:])})" if len(found) > 1 else ""
    raise Refused(
        f"""
        Model {first.model}{others} version {first.version} is slower than version {first.previous}
        beyond max_latency_increase {bound:g} at concurrency {compared.concurrency}: p50
        {compared.after.p50_us / 1000:.2f} ms against {compared.before.p50_us / 1000:.2f} ms, p99
        {compared.after.p99_us / 1000:.2f} ms against {compared.before.p99_us / 1000:.2f} ms, throughput
        {compared.after.throughput:.0f} against {compared.before.throughput:.0f} infer/s; p50 ratio
        {compared.p50.estimate:.2f}x with the interval {compared.p50.low:.2f}x to {compared.p50.high:.2f}x
        over {compared.pairs} rounds each, wholly above {1 + bound:.2f}x. Nothing is released. If the new
        version must be slower, release it with a larger --max-latency-increase (the max_latency_increase
        setting, the action's input max-latency-increase) or without it; else make it faster.""",
        result=run,
    )


def _check_under_load(run: GoldenRun, bound: float) -> None:
    """Refuse a new version that crashed, hung or errored while perf_analyzer drove it: a version
    that does not hold the load is slower than any bound. The server's last lines about it are the
    details."""
    assert run.latency is not None
    found = run.latency.failed
    if not found:
        return
    first = found[0]
    failure = first.under_load
    assert failure is not None
    others = f" (and {', '.join(m.model for m in found[1:])})" if len(found) > 1 else ""
    said = (
        "the server's last lines about it are above" if failure.server_lines else "the server logged nothing naming it"
    )
    raise Refused(
        f"""
        Model {first.model}{others} version {first.version} {failure.what} under the latency gate's
        load (perf_analyzer on its golden inputs, beside version {first.previous}): {failure.error}.
        A version that does not hold the load is a regression whatever max_latency_increase
        {bound:g} allows; {said}. Nothing is released. Run
        its golden inputs against it in a loop (perf_analyzer -m {first.model} -x {first.version}) to
        see it fail, and fix the model.""",
        details=[f"server: {line}" for line in failure.server_lines],
        result=run,
    )


def _check_unmeasured(run: GoldenRun, bound: float) -> None:
    """With `latency_unmeasured: refuse`, refuse the models with a version before that the gate
    left out, each with its reason."""
    assert run.latency is not None
    found = run.latency.not_gated
    if not found or run.latency.unmeasured != "refuse":
        return
    reasons = "; ".join(f"{m.model}: {m.note}" for m in found)
    raise Refused(
        f"""
        {len(found)} model(s) with a new version were not gated by the latency gate
        (max_latency_increase {bound:g}), and latency_unmeasured is refuse: {reasons}. Nothing is
        released. Give each a golden case a plain request can replay, or set latency_unmeasured:
        allow (--latency-unmeasured allow, the action's input latency-unmeasured) to release them
        listed as not gated.""",
        result=run,
    )


def check_drift(run: GoldenRun, bound: float) -> None:
    """Refuse a drift above `bound`: the largest relative difference of a model's new version
    from its previous one (models/drift.py)."""
    from triton_release.console.golden import show_fraction
    from triton_release.models.drift import over

    unmeasured = [d for d in run.drift if d.unmeasured]
    if unmeasured:  # a gate that could not decide refuses
        listed = "; ".join(f"{d.model} ({d.note})" for d in unmeasured[:5])
        more = f"; and {len(unmeasured) - 5} more" if len(unmeasured) > 5 else ""
        raise Refused(
            f"""
            The drift of {listed}{more} could not be measured, and max_drift {bound:g} is set: a drift gate
            that cannot decide refuses. Nothing is released. Where a model's environment changed, its
            version N answers only as released in the previous image; to release the change knowingly,
            run without --max-drift (the max_drift setting, the action's input max-drift) this once.""",
            result=run,
        )
    found = over(run.drift, bound)
    if not found:
        return
    first = found[0]
    worst = first.worst
    where = f" (output {worst.name}{': ' + worst.worst if worst.worst else ''})" if worst else ""
    others = f" (and {', '.join(d.model for d in found[1:])})" if len(found) > 1 else ""
    raise Refused(
        f"""
        Model {first.model}{others} drifted beyond max_drift {bound:g}: version {first.version} answers
        its golden inputs up to {show_fraction(first.max_rel_diff)} apart from version
        {first.previous}{where}. Nothing is released. If the change is intended, release it
        without --max-drift (the max_drift setting, the action's input max-drift) or with a larger
        bound; else fix the model.""",
        result=run,
    )


@dataclass(frozen=True)
class Signatures:
    """The tested image labelled with its auto-complete models' signatures, and the version they make."""

    image_id: str
    version: str
    kind: releases.ReleaseKind
    signatures: dict

    def to_json(self) -> dict:
        return {
            "image_id": self.image_id,
            "version": self.version,
            "release": self.kind.to_json(),
            "models": sorted(self.signatures),
        }


def signatures(
    image: str, tag: str, run: GoldenRun, planned: ChangesResult, previous_labels: dict, version: str
) -> Signatures:
    """Label the tested image with the signatures its auto-complete models were served with (no
    layer changes), and count them in the release: a signature changed since the previous release
    can make it major."""
    from triton_release.image.build import relabel

    served = {name: sig for name, config in run.completed if (sig := releases.served_signature(config))}
    before = releases.signatures_from_label(previous_labels.get(SIGNATURES_LABEL))
    given = {("base", m): s for m, s in before.items()} | {("head", m): s for m, s in served.items()}
    kind = releases.release_kind(planned.found, {b.model for b in planned.bumps}, given)
    if releases.ORDER[kind.kind] > releases.ORDER[planned.kind.kind] and planned.plan is not None:
        previous = releases.parse_version(planned.plan.previous) if planned.plan.previous else None
        version = str(releases.next_version(previous, kind.kind))
    else:
        kind = planned.kind
    current = {m: s for m, s in before.items() if m not in planned.found.removed} | served
    labels = {SIGNATURES_LABEL: releases.signatures_label(current), VERSION_LABEL: version}
    return Signatures(relabel(image, labels, tag), version, kind, current)


def _image_models(client: docker.DockerClient, image: str) -> dict[str, list[int]]:
    """The models and version folders an image built by this tool holds (its label); {} for others."""
    import docker

    try:
        text = (client.images.get(image).labels or {}).get(MODELS_LABEL, "")
        found = json.loads(text) if text else {}
    except (docker.errors.DockerException, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {
        str(name): [v for v in versions if isinstance(v, int)]
        for name, versions in found.items()
        if isinstance(versions, list)
    }


def _image_environments(client: docker.DockerClient, image: str) -> dict[str, str]:
    """The models with their own environment in an image built by this tool (its label) -> that
    environment's path in the image; {} for others."""
    import docker

    from triton_release.image.environments import ENVS

    try:
        text = (client.images.get(image).labels or {}).get(ENVIRONMENTS_LABEL, "")
        found = json.loads(text) if text else {}
    except (docker.errors.DockerException, ValueError):
        return {}
    return {str(name): f"/{ENVS / str(name)}" for name in found} if isinstance(found, dict) else {}


def _shown(path: Path, root: Path, shown_as: Path) -> Path:
    try:
        return shown_as / path.resolve().relative_to(root.resolve())
    except ValueError:
        return path


@dataclass(frozen=True)
class Recorded:
    image: str
    written: tuple[str, ...]

    def to_json(self) -> dict:
        return {"image": self.image, "written": list(self.written)}


def record(
    root: Path,
    image: str,
    names: list[str],
    *,
    server_options: ServerOptions = DEFAULT_SERVER,
    overwrite: bool = False,
) -> Recorded:
    """Fill in the outputs of golden cases that have none with what the server answers; in waves
    of at most `max_loaded` models, as `test`. Without `gpus`, KIND_GPU models answer from the
    CPU; one that cannot load there is refused (there is no answer to record)."""
    from triton_release.image.engine import docker_client, require_local_image
    from triton_release.models.answers import NotRecorded, recorded
    from triton_release.models.config.completion import image_held
    from triton_release.models.devices import image_cpu_overrides
    from triton_release.models.inference import ask
    from triton_release.models.suite import deferred, load_cases, models_to_load, plan_waves
    from triton_release.server.container import TritonServer

    repo = Repository.load(root)
    todo = [c for c in load_cases(repo, names) if overwrite or c.unrecorded]  # unrecorded: "error": true too
    if not todo:
        return Recorded(image, ())
    written = []
    models = sorted({c.model for c in todo})
    load = models_to_load(repo, models)
    waves = plan_waves(repo, models, server_options.max_loaded)
    client = docker_client()
    require_local_image(client, image)
    shipped = _image_models(client, image)
    held, completing = image_held(client, image, {name: shipped.get(name, ()) for name in load})
    overrides = {} if server_options.gpus else image_cpu_overrides(repo, held, _image_environments(client, image))
    with TritonServer.started_as(
        replace(server_options, gpu_models="require"),
        image,
        {m: load[m] for m in waves[0].load},
        client=client,
        overrides=overrides,
        deferred=deferred(repo, load, overrides),
        auto_complete=completing is not None,
    ) as server:
        for wave in waves:
            server.switch_to({m: load[m] for m in wave.load})
            for case in (c for c in todo if c.model in wave.tested):
                decoupled = repo[case.model].decoupled
                exchange = ask(case, server.http_url, server.grpc_url, decoupled=decoupled)
                if exchange.failure:
                    raise Refused(f"{case.path}: inference failed ({exchange.failure}); nothing was written to it.")
                raw = json.loads(case.path.read_text(encoding="utf-8"))
                try:
                    recorded(case, raw, exchange.replies, decoupled, overwrite)
                except NotRecorded as exc:
                    raise Refused(f"{case.path}: {exc}. Nothing was written to it.") from None
                write_atomic(case.path, json.dumps(raw, indent=2, ensure_ascii=False) + "\n")
                written.append(str(case.path))
    return Recorded(image, tuple(written))
