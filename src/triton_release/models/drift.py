"""Drift: how a model's new version N+1 answers its golden inputs compared with version N.

The server serves both versions, loaded through the repository API with the model's config as the
image holds it (its environment's EXECUTION_ENV_PATH, and for a KIND_GPU model tested on the CPU
its instance groups made KIND_CPU, as `models.devices` does), `version_policy` set to `specific {
versions: [N, N+1] }`. A model whose policy is Triton's default (the newest version) is loaded so
from its wave's first load (`side_by_side`): both versions' stubs start together, where a reload
after its cases would start them both again (Triton reloads every version of a model whose config
changed). Its golden cases still test N+1: a case that names no version goes to the newest, and a
model with a case that pins another version is not paired (the image alone would not serve N to
it). When N fails to load beside N+1, the model is loaded alone, as the image holds it, and its
drift is not measured (noted). Other models are reloaded so after their golden cases passed,
unless their own policy already serves N. Every case is then sent to N and to N+1 and the answers
are compared with each other, output by output: N's answer is the reference.

Per element, with the case's tolerances for the output's data type (`answers.tolerances`), by
the rule a golden case is checked with (`models.elements`, N's answer the reference): the
absolute and the relative difference, and beyond tolerance where |new - old| > atol + rtol *
|old|. Integers compare exactly, as integers; BOOL and BYTES elements are equal or not (a
difference has no size: its relative difference is infinite). An output whose data type or
shape changed differs beyond tolerance, infinitely; so do the outputs of a decoupled model whose
number of responses changed.

Only the outputs both versions answer are compared. An output that N+1 answers and N never did
is new, and one that N answered and N+1 never does is gone: both are reported as such, not as
drift (adding an output is a minor release, removing one a major; a difference in kind, which no
size measures). An output both versions answer, missing from one version's answer to one step or
response, differs beyond tolerance, infinitely.

What is compared: each step of a sequence case (with a correlation id of its own per version),
each response of a decoupled model in order. Not compared, and noted: steps that expect an
error, steps where either version answered with an error, cases that pin another "version",
and models without a version N in the image (a new model) or whose version N did not load.

A model's drift is its largest relative difference over every output of every compared case:
what `max_drift` bounds. Drift is reported; it refuses a release only above `max_drift`. A model
loaded for it keeps both versions loaded until its wave's models are unloaded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from google.protobuf import json_format

from triton_release.models.answers import Reply, tolerances
from triton_release.models.config.schema import model_config_pb2
from triton_release.models.devices import ENV_PARAMETER, cpu_config
from triton_release.models.elements import compare_elements, json_figure
from triton_release.models.golden import GoldenCase, load_case
from triton_release.models.inference import CaseResult, Exchange, ask
from triton_release.models.repository import Repository

INFINITE = math.inf


class Server(Protocol):
    """What drift needs of a running server (server/container.py's TritonServer, its model_control)."""

    http_url: str
    grpc_url: str
    unloadable: dict[str, str]
    overrides: dict[str, str]
    apart: dict[str, str]

    def model_ready(self, name: str, version: int | None) -> bool: ...
    def check_running(self, during: str) -> None: ...
    def load_configs(self, loads: dict[str, tuple[str, list[int]]]) -> dict[str, str]: ...


# -- one output of one answer against the other ---------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One output of one step (or response): version N's answer against N+1's."""

    max_abs_diff: float | None  # None: no size (BYTES, BOOL, a changed shape or data type)
    max_rel_diff: float
    beyond_tolerance: bool
    where: str = ""  # the worst element: "[0, 3]: 5.0 -> 5.05", or what changed


def difference(
    old: np.ndarray | None, old_type: str, new: np.ndarray | None, new_type: str, atol: float, rtol: float
) -> Difference:
    if old is None or new is None:
        which = "N" if old is None else "N+1"
        return Difference(None, INFINITE, True, f"version {which} did not answer it")
    if old_type != new_type:
        return Difference(None, INFINITE, True, f"data type {old_type} -> {new_type}")
    if tuple(old.shape) != tuple(new.shape):
        return Difference(None, INFINITE, True, f"shape {list(old.shape)} -> {list(new.shape)}")
    found = compare_elements(old, new, old_type, atol, rtol)
    worst = found.worst
    if worst is None:
        return Difference(found.max_abs_diff, 0.0, False)
    if worst.abs_diff is None:  # BOOL and BYTES: equal or not
        where = f"{found.beyond} of {found.size} element(s) differ; first {worst.index}: "
    else:
        where = f"{worst.index}: "
    return Difference(
        found.max_abs_diff, found.max_rel_diff, not found.within, where + f"{worst.reference} -> {worst.actual}"
    )


# -- a case's answers from both versions ---------------------------------------------------------


@dataclass(frozen=True)
class CaseDrift:
    """A case's outputs compared (output -> its differences over steps and responses), what of it
    was not compared, and the outputs only one version answered (in any step or response)."""

    case: str
    outputs: tuple[tuple[str, tuple[Difference, ...]], ...]
    skipped: tuple[str, ...] = ()
    new_outputs: tuple[str, ...] = ()  # answered by N+1 only
    gone_outputs: tuple[str, ...] = ()  # answered by N only


def _answered(replies: Iterable[Reply]) -> set[str]:
    return {name for reply in replies if reply.error is None for answer in reply.answers for name in answer.outputs}


def compare_case(case: GoldenCase, old: Exchange, new: Exchange) -> CaseDrift:
    """Both versions' replies to `case`, step by step and response by response: the outputs both
    versions answered; those only one did are named apart."""
    label = f"{case.model}/{case.name}"
    found: dict[str, list[Difference]] = {}
    skipped: list[str] = []
    compared_steps = [i for i, step in enumerate(case.steps) if step.error is None]
    before_names = _answered(old.replies[i] for i in compared_steps if i < len(old.replies))
    after_names = _answered(new.replies[i] for i in compared_steps if i < len(new.replies))
    both = before_names & after_names
    for index, step in enumerate(case.steps):
        where = f"{label} step {index + 1}" if case.sequence is not None else label
        if step.error is not None:
            skipped.append(f"{where}: expects an error")
            continue
        if index >= len(old.replies) or index >= len(new.replies):
            failure = old.failure or new.failure or "no answer"
            skipped.append(f"{where}: no answer from version {'N' if index >= len(old.replies) else 'N+1'} ({failure})")
            continue
        before, after = old.replies[index], new.replies[index]
        if before.error is not None or after.error is not None:
            which, reply = ("N", before) if before.error is not None else ("N+1", after)
            skipped.append(f"{where}: version {which} answered with an error ({reply.shown_error.splitlines()[0]})")
            continue
        for response, (x, y) in enumerate(zip(before.answers, after.answers)):
            prefix = f"{where} response {response + 1}" if len(before.answers) > 1 else where
            for name in sorted((set(x.outputs) | set(y.outputs)) & both):
                old_array, old_type, _ = x.outputs.get(name, (None, "", ""))
                new_array, new_type, _ = y.outputs.get(name, (None, "", ""))
                atol, rtol = tolerances(case, old_type or new_type)
                diff = difference(old_array, old_type, new_array, new_type, atol, rtol)
                found.setdefault(name, []).append(replace(diff, where=f"{prefix} {diff.where}".strip()))
        if len(before.answers) != len(after.answers):  # a decoupled model's stream changed
            for name in {n for answer in (*before.answers, *after.answers) for n in answer.outputs}:
                found.setdefault(name, []).append(
                    Difference(
                        None, INFINITE, True, f"{where}: {len(before.answers)} -> {len(after.answers)} responses"
                    )
                )
    return CaseDrift(
        label,
        tuple((name, tuple(diffs)) for name, diffs in sorted(found.items())),
        tuple(skipped),
        tuple(sorted(after_names - before_names - set(found))),
        tuple(sorted(before_names - after_names - set(found))),
    )


# -- a model: its outputs over every case ---------------------------------------------------------


@dataclass(frozen=True)
class OutputDrift:
    name: str
    max_abs_diff: float | None
    max_rel_diff: float
    cases: int  # cases that compared this output
    cases_beyond_tolerance: int
    worst: str = ""  # where the largest relative difference is

    @property
    def beyond_tolerance(self) -> bool:
        return self.cases_beyond_tolerance > 0

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "max_abs_diff": json_figure(self.max_abs_diff),
            "max_rel_diff": json_figure(self.max_rel_diff),
            "cases": self.cases,
            "cases_beyond_tolerance": self.cases_beyond_tolerance,
            "worst": self.worst,
        }


@dataclass(frozen=True)
class ModelDrift:
    model: str
    version: int  # N+1, the tested one
    previous: int | None  # N; None: there is none
    outputs: tuple[OutputDrift, ...] = ()
    cases: int = 0  # cases compared
    skipped: tuple[str, ...] = ()  # parts of cases not compared, and why
    note: str = ""  # why the model was not compared at all
    new_outputs: tuple[str, ...] = ()  # answered by N+1 and never by N: nothing to compare them with
    gone_outputs: tuple[str, ...] = ()  # answered by N and never by N+1
    # a comparison there was to make, and that could not be made (an environment changed, version N
    # did not load, no case could be asked of both): a gate given a bound refuses it, never passes it
    unmeasured: bool = False

    @property
    def compared(self) -> bool:
        return not self.note

    @property
    def max_rel_diff(self) -> float:
        """The model's drift: its largest relative difference over all outputs (0 when nothing compared)."""
        return max((o.max_rel_diff for o in self.outputs), default=0.0)

    @property
    def worst(self) -> OutputDrift | None:
        return max(self.outputs, key=lambda o: o.max_rel_diff, default=None)

    @property
    def beyond_tolerance(self) -> bool:
        return any(o.beyond_tolerance for o in self.outputs)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "from_version": self.previous,
            "to_version": self.version,
            "compared": self.compared,
            "unmeasured": self.unmeasured,
            "note": self.note,
            "cases": self.cases,
            "max_rel_diff": json_figure(self.max_rel_diff) if self.compared else None,  # never 0.0 unmeasured
            "beyond_tolerance": self.beyond_tolerance,
            "outputs": [o.to_json() for o in self.outputs],
            "skipped": list(self.skipped),
            "new_outputs": list(self.new_outputs),
            "gone_outputs": list(self.gone_outputs),
        }


def model_drift(
    model: str, version: int, previous: int, cases: list[CaseDrift], skipped: Iterable[str] = ()
) -> ModelDrift:
    """The cases' differences gathered per output: the largest of each, the cases beyond tolerance.
    An output only one version answered is new (or gone) when no case has both versions answer it;
    else, in the cases where one version left it out, it differs infinitely."""
    by_output: dict[str, list[tuple[str, tuple[Difference, ...]]]] = {}
    for case in cases:
        for name, diffs in case.outputs:
            by_output.setdefault(name, []).append((case.case, diffs))
    compared = set(by_output)
    for case in cases:
        for names, which in ((case.new_outputs, "N"), (case.gone_outputs, "N+1")):
            for name in names:
                if name in compared:
                    by_output[name].append(
                        (
                            case.case,
                            (Difference(None, INFINITE, True, f"{case.case}: version {which} did not answer it"),),
                        )
                    )
    new = sorted({name for case in cases for name in case.new_outputs} - compared)
    gone = sorted({name for case in cases for name in case.gone_outputs} - compared)
    outputs = []
    for name, found in sorted(by_output.items()):
        differences = [d for _, ds in found for d in ds]
        sized = [d.max_abs_diff for d in differences if d.max_abs_diff is not None]
        worst = max(differences, key=lambda d: d.max_rel_diff)
        outputs.append(
            OutputDrift(
                name,
                max(sized) if sized else None,
                worst.max_rel_diff,
                len(found),
                sum(any(d.beyond_tolerance for d in ds) for _, ds in found),
                worst.where if worst.max_rel_diff > 0 else "",
            )
        )
    notes = [
        *skipped,
        *(s for case in cases for s in case.skipped),
        *(
            f"output {name!r} is new in version {version}: version {previous} never answered it, so there is "
            "nothing to compare it with"
            for name in new
        ),
        *(f"output {name!r} is gone in version {version}: version {previous} answered it" for name in gone),
    ]
    return ModelDrift(
        model,
        version,
        previous,
        tuple(outputs),
        sum(bool(c.outputs) for c in cases),
        tuple(notes),
        new_outputs=tuple(new),
        gone_outputs=tuple(gone),
    )


def over(drifts: Iterable[ModelDrift], bound: float) -> list[ModelDrift]:
    """The models whose drift is above `bound` (max_drift)."""
    return [d for d in drifts if d.compared and d.max_rel_diff > bound]


# -- the server side ------------------------------------------------------------------------------


def drift_config(
    config: model_config_pb2.ModelConfig | None, versions: list[int], env_path: str | None = None, on_cpu: bool = False
) -> str:
    """The load's `config` parameter serving `versions` side by side: the model's config as the
    image holds it (with its environment; for a KIND_GPU model tested on the CPU, as
    `devices.cpu_override` makes it), `version_policy` replaced. A model without config.pbtxt
    gets what the image would give it: the backend, for Triton to complete."""
    if config is None:
        base = model_config_pb2.ModelConfig(backend="python")
        if env_path is not None:
            base.parameters[ENV_PARAMETER].string_value = env_path
    elif on_cpu:
        base = cpu_config(config, env_path)
    else:
        base = model_config_pb2.ModelConfig()
        base.CopyFrom(config)
        if env_path is not None:
            base.parameters[ENV_PARAMETER].string_value = env_path
    base.version_policy.Clear()
    base.version_policy.specific.versions[:] = sorted(versions)
    return json_format.MessageToJson(base, preserving_proto_field_name=True, indent=None, sort_keys=True)


def side_by_side(
    repo: Repository,
    previous: Mapping[str, int | None],
    versions: Mapping[str, int | None],
    *,
    environments: Mapping[str, str] | None = None,
    on_cpu: Iterable[str] = (),
    unmeasurable: Mapping[str, str] | None = None,
    configs: Mapping[str, model_config_pb2.ModelConfig | None] | None = None,
) -> dict[str, str]:
    """The models whose version N (`previous`) is served beside N+1 (`versions`) from their first
    load -> the load's config (`drift_config`): those drift will compare, whose policy is Triton's
    default, none of whose cases pins another version, and which no other model served (`versions`)
    needs (an ensemble's or a BLS caller's load makes Triton load the models it needs from their
    files). `configs`: each model's config as the image holds it (`warmup: golden` wrote
    model_warmup into it): the load's config is made from that one, so the pair is served as it
    ships; the checkout's when absent."""
    environments, unmeasurable, on_cpu = environments or {}, unmeasurable or {}, set(on_cpu)
    configs = configs or {}
    needs = repo.needs()  # of the models served: one the server does not hold loads nothing
    needed = {name for model in versions if model in repo for name in needs.get(model, ())}
    found = {}
    for name, old in previous.items():
        new = versions.get(name)
        if old is None or new is None or name in unmeasurable or name in needed or name not in repo:
            continue
        model = repo[name]
        config = configs.get(name) or model.config
        if not model.golden_cases or (config is not None and config.HasField("version_policy")):
            continue
        cases = [load_case(path, name)[0] for path in model.golden_cases]
        if any(case is None or case.version not in (None, new) for case in cases):
            continue
        found[name] = drift_config(config, [old, new], environments.get(name), on_cpu=name in on_cpu)
    return found


def previous_version(versions: Iterable[int], version: int | None) -> int | None:
    """The version before `version` among `versions` (the image's): the highest lower one."""
    lower = [v for v in versions if version is not None and v < version]
    return max(lower) if lower else None


class DriftMeter:
    """Measures the drift of the models in `previous` (model -> its version N, None: none) as each
    wave's cases have run. `versions`: the tested version N+1 of each; `environments`: model ->
    its environment's path in the image."""

    def __init__(
        self,
        repo: Repository,
        server: Server,
        previous: Mapping[str, int | None],
        versions: Mapping[str, int | None],
        environments: Mapping[str, str] | None = None,
        unmeasurable: Mapping[str, str] | None = None,
    ) -> None:
        self.repo, self.server = repo, server
        self.previous = dict(previous)
        self.unmeasurable = dict(unmeasurable or {})  # model -> why its drift cannot be measured here
        self.versions = dict(versions)
        self.environments = dict(environments or {})
        self.results: list[ModelDrift] = []
        self.load_seconds = 0.0  # spent loading previous versions beside the new ones (the rest compares)

    def after_wave(self, tested: Iterable[str], cases: Iterable[CaseResult]) -> None:
        """The models of a wave whose golden cases all passed; the others are noted. Those whose
        version N is not served yet are reloaded with N beside N+1 together, then compared one
        by one."""
        failed = {c.case.split("/", 1)[0] for c in cases if not c.passed}
        names = [name for name in tested if name in self.previous]
        notes = {name: self._note(name, "its golden cases failed: not compared") for name in names if name in failed}
        notes.update(
            {
                name: self._note(name, why, unmeasured=name in self.unmeasurable or name in self.server.apart)
                for name in names
                if name not in notes
                if (why := self._not_comparable(name))
            }
        )
        loads = {}
        for name in names:
            if name not in notes and not self.server.model_ready(name, self.previous[name]):
                versions = list(self._versions(name))
                loads[name] = (
                    drift_config(
                        self.repo[name].config,
                        versions,
                        self.environments.get(name),
                        on_cpu=name in self.server.overrides,
                    ),
                    versions,
                )
        start = time.monotonic()
        failures = {name: why for name, why in self.server.load_configs(loads).items() if why}
        self.load_seconds += time.monotonic() - start
        if failures:  # a server that died while reloading (out of memory) is a failure, not notes
            self.server.check_running("while loading models' previous versions to measure their drift")
        for name, why in failures.items():
            notes[name] = self._note(
                name, f"version {self.previous[name]} did not load beside {self.versions[name]}: {why}", unmeasured=True
            )
        self.results.extend(notes.get(name) or self._compare(name) for name in names)

    def _versions(self, name: str) -> tuple[int, int]:
        previous, version = self.previous[name], self.versions[name]
        assert previous is not None and version is not None
        return previous, version

    def _note(self, name: str, why: str, *, unmeasured: bool = False) -> ModelDrift:
        return ModelDrift(name, self.versions.get(name) or 0, self.previous.get(name), note=why, unmeasured=unmeasured)

    def _not_comparable(self, name: str) -> str:
        """Why `name`'s new version cannot be compared with its previous one, or ""."""
        version, previous = self.versions.get(name), self.previous.get(name)
        if name in self.unmeasurable:
            return self.unmeasurable[name]
        if version is None:
            return "no numbered version folder"
        if previous is None:
            return f"no version before {version} in the image (a new model): nothing to compare"
        if name in self.server.unloadable:
            return f"not loaded ({self.server.unloadable[name]})"
        if name in self.server.apart:
            return f"version {previous} did not load beside {version}: {self.server.apart[name]}"
        if not self.repo[name].golden_cases:
            return "no golden cases"
        return ""

    def _compare(self, name: str) -> ModelDrift:
        previous, version = self._versions(name)
        model = self.repo[name]
        compared, skipped = [], []
        for path in model.golden_cases:
            case, _ = load_case(path, name)
            if case is None:
                continue
            if case.version is not None and case.version != version:
                skipped.append(f"{name}/{case.name}: pins version {case.version}")
                continue
            old = ask(replace(case, version=previous), self.server.http_url, self.server.grpc_url, model.decoupled)
            new = ask(replace(case, version=version), self.server.http_url, self.server.grpc_url, model.decoupled)
            compared.append(compare_case(case, old, new))
        if not compared:  # nothing asked of both versions: no figure, never 0.0
            why = "no golden case could be asked of both versions" + (f" ({'; '.join(skipped)})" if skipped else "")
            return ModelDrift(name, version, previous, skipped=tuple(skipped), note=why, unmeasured=True)
        return model_drift(name, version, previous, compared, skipped)
