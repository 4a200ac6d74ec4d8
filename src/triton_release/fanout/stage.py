"""The first two stages of a release over many runners, composed from the steps as `release` is.

`stage`: validate, changed, export (the bump applied in the export only: the working tree is
never bumped), environments, the shard plan, build, then push the candidate to
`candidate-<sha12>` in the release repository. Nothing is tagged X.Y.Z and no channel moves, so
a failed stage leaves nothing to undo; a rerun for the same commit, base and build inputs (the
base image's id, the stub, the Python, the settings that shape the image: its label
`triton-release.build-inputs`) finds the candidate and reuses it. With any input changed, the
commit is built again and its candidate tag moves to the new candidate.

`test` of a candidate: pull REPO@sha256:... by digest, run the golden cases of one shard (or the
given models) against the commit it was built from, and with a shard name write the shard's
record to the registry, passed or failed, before the run ends with the test's outcome. The
record states the golden cases the plan holds of each model and the cases run; a shard that ran
fewer than planned (its checkout lacks them) failed, and one that set a model aside for lacking
a GPU says so, for promote to refuse or, with gpu_models test, to accept.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release import steps
from triton_release.contract import (
    BUILD_INPUTS_LABEL,
    CANDIDATE_TAG,
    CHANGED_LABEL,
    CHANGED_MODELS_LABEL,
    DRIFT_UNMEASURABLE_LABEL,
    NEW_VERSIONS_LABEL,
    SHARDS_LABEL,
)
from triton_release.errors import Refused, UsageError
from triton_release.evidence import attach
from triton_release.evidence.statements import EvidenceOptions
from triton_release.history import releases
from triton_release.history.bump import checkout_at
from triton_release.models.gates import NO_GATES, GateOptions
from triton_release.models.shards import (
    build_inputs_label,
    changed_label,
    check_shard_name,
    shards_label,
    unmeasurable_label,
)
from triton_release.release import one_at_a_time, prepare
from triton_release.session import Session
from triton_release.settings import ImageOptions, PublishOptions, ServerOptions

if TYPE_CHECKING:
    from triton_release.registry.candidate.shard_results import ShardResult
    from triton_release.registry.client import RegistryRepository


@dataclass(frozen=True)
class StageRequest:
    model_repository: Path
    repository: RegistryRepository
    base: str | None
    head: str
    image: ImageOptions  # what the candidate is built from and how
    publish: PublishOptions  # its channel: a label of the candidate and one of its build inputs
    shards: int | None = None  # this many shards ...
    max_models: int | None = None  # ... or as many as hold at most this many tested models each
    source: str = ""
    evidence: EvidenceOptions = EvidenceOptions()  # how the candidate's provenance and SBOM are signed, who built it


def run_stage(request: StageRequest, session: Session) -> None:
    releases.check_channel(request.publish.channel)
    with one_at_a_time(request.repository, session.console):  # the local build tag is the release's
        _stage(request, session)


def _stage(request: StageRequest, session: Session) -> None:
    console, report = session.console, session.report
    root, repository = request.model_repository, request.repository

    session.step(
        "validate",
        console.validation,
        steps.validate,
        root,
        requirements_options=request.image.requirements_options,
        custom_backends=request.image.custom_backends,
    )
    planned = session.step(
        "changed", console.changes, steps.changes, root, request.base, head=request.head, registry=repository, plan=True
    )
    assert planned.plan is not None
    if planned.plan.version is None and not planned.to_test:
        report.facts.update({"released": False, "shards": []})
        console.not_released("no model changed: nothing staged")
        return
    from triton_release.registry.candidate.stage import find_reusable, push_candidate  # they bring docker's client

    found = session.step(
        "reuse",
        console.candidate_reused,
        find_reusable,
        repository,
        planned.found.head,
        planned.found.base,
        _build_inputs(request),
    )
    if found is not None:
        return
    with tempfile.TemporaryDirectory(prefix="triton-release-") as scratch:
        _, exported, prepared, to_test, version = prepare(
            session, root, planned, Path(scratch), request.image, repository, bumped=False
        )
        plan = session.step(
            "shards",
            console.shards_planned,
            steps.plan_shards,
            exported,
            to_test,
            shards=request.shards,
            max_models=request.max_models,
        )
        labels = {
            SHARDS_LABEL: shards_label(list(plan.shards)),
            CHANGED_LABEL: changed_label(to_test),
            CHANGED_MODELS_LABEL: changed_label(planned.found.models),
            NEW_VERSIONS_LABEL: changed_label(planned.new_versions),
            DRIFT_UNMEASURABLE_LABEL: unmeasurable_label(prepared.drift_unmeasurable),
            BUILD_INPUTS_LABEL: build_inputs_label(_build_inputs(request, prepared.base.image_id)),
            **planned.record_label(),
        }
        built = session.step(
            "build",
            console.built,
            steps.build,
            exported,
            request.image,
            f"{repository}:{CANDIDATE_TAG}",
            revision=planned.found.head,
            source=request.source,
            version=version or "",
            bumped_from=planned.found.base,
            channel=request.publish.channel,
            prepared=prepared,
            extra_labels=labels,
        )
    staged = session.step(
        "candidate", console.candidate_pushed, push_candidate, built.image_id, repository, planned.found.head
    )
    evidence = request.evidence
    session.step(
        "evidence",
        console.evidence,
        attach.stage,
        repository,
        staged.candidate.digest,
        staged.candidate.version,
        planned=planned,
        prepared=built.prepared,  # with the stub compiled during the build, for the provenance
        signing=evidence.signing,
        invocation=evidence.invocation,
        settings=evidence.settings,
    )


def _build_inputs(request: StageRequest, base_image_id: str | None = None) -> dict:
    """What the candidate is built from besides its commit (registry/candidate/stage.py), the base image
    by its id (`base_image_id`, else looked up: pulled when the daemon lacks it, as the build would)."""
    from triton_release.registry.candidate.stage import build_inputs

    if base_image_id is None:
        from triton_release.image.base import image_id
        from triton_release.image.engine import docker_client

        base_image_id = image_id(docker_client(), request.image.base_image)
    return build_inputs(request.image, request.publish, base_image_id=base_image_id, source=request.source)


@dataclass(frozen=True)
class CandidateTestRequest:
    model_repository: Path
    repository: RegistryRepository
    digest: str  # sha256:... of the candidate in `repository`
    shard: str | None  # with a shard: its models (unless `models`), and its record written
    models: tuple[str, ...] = ()
    junitxml: str | None = None
    keyword: str | None = None
    server: ServerOptions = ServerOptions()  # how tritonserver runs the shard's golden cases
    gates: GateOptions = NO_GATES  # beyond the drift or latency bound the shard's record fails


def run_candidate_test(request: CandidateTestRequest, session: Session) -> None:
    from triton_release.registry.candidate.shard_results import ShardResult
    from triton_release.registry.candidate.stage import pull_candidate  # it brings docker's client

    if request.shard is not None:
        check_shard_name(request.shard)
    if request.shard is not None and request.keyword:
        raise UsageError(
            "-k selects some cases, and a shard's record must hold all of them: give -k or --shard, not both."
        )
    console = session.console
    pulled = session.step("pull", console.candidate_pulled, pull_candidate, request.repository, request.digest)
    shard = pulled.shard(request.shard) if request.shard is not None else None
    names = list(request.models) or (
        list(shard.models)
        if shard is not None
        else list(pulled.candidate.changed)
        if pulled.candidate is not None
        else []
    )
    counts = shard.case_counts() if shard is not None else None
    planned = tuple((name, counts.get(name, 0)) for name in names) if counts is not None else None
    with tempfile.TemporaryDirectory(prefix="triton-release-") as scratch:
        root = _golden_cases_of(request.model_repository, pulled.revision, Path(scratch), session)
        if not names:
            from triton_release.models.repository import Repository

            names = sorted(Repository.load(root).models)
        junit = request.junitxml or str(Path(scratch) / "junit.xml")
        labelled = pulled.candidate.new_versions if pulled.candidate is not None else None
        unmeasurable = pulled.candidate.drift_unmeasurable if pulled.candidate is not None else {}
        new = tuple(n for n in names if n in labelled) if labelled is not None else ()
        if labelled is None and request.gates.max_drift is not None:
            console.warning(
                f"{pulled.ref} does not say which of its models have a new version (it was staged "
                "by an earlier triton-release): no drift is measured and max-drift bounds nothing. "
                "Stage the commit again to measure it."
            )
        try:
            run = session.step(
                "test",
                console.golden_run,
                steps.test,
                root,
                pulled.ref,
                names,
                server_options=request.server,
                junitxml=junit,
                keyword=request.keyword,
                shown_as=request.model_repository,
                new_versions=new,
                drift_unmeasurable=unmeasurable,
                gates=request.gates,
            )
        except Refused as exc:  # a verdict: the shard failed, and its record says so
            if request.shard is not None:
                cases = _cases(exc.result)
                reason = "" if any(not c["passed"] for c in cases) else _first_sentence(str(exc))
                record = ShardResult(
                    request.digest,
                    request.shard,
                    tuple(names),
                    False,
                    cases,
                    pulled.revision,
                    reason,
                    planned,
                    tuple(getattr(exc.result, "needs_gpu", None) or ()),
                )
                try:
                    _write_record(session, request.repository, record, junit)
                except Exception as late:  # never masks the failure being reported
                    console.warning(
                        f"the failed shard's record could not be written ({late}); promote finds "
                        "none for it and refuses all the same"
                    )
            raise
        if request.shard is not None:
            record = ShardResult(
                request.digest,
                request.shard,
                tuple(names),
                True,
                _cases(run),
                pulled.revision,
                planned_cases=planned,
                needs_gpu=tuple(run.needs_gpu),
            )
            short = [u for u in record.untested(dict(planned or ())) if not u[3]]  # u[3]: the GPU it needs
            if short:  # cases the plan holds and the checkout lacks: not tested, so the shard failed
                ran, wanted = sum(u[1] for u in short), sum(u[2] for u in short)
                where = (
                    request.model_repository
                    if root == request.model_repository
                    else f"commit {pulled.revision[:12]} as checked out here"
                )
                reason = (
                    f"ran {ran} of {wanted} planned golden cases of "
                    f"{', '.join(f'{m} ({r} of {n})' for m, r, n, _ in short)}: {where} lacks them"
                )
                record = replace(record, passed=False, reason=reason)
            _write_record(session, request.repository, record, junit)
            if short:
                raise Refused(
                    f"""
                    {request.shard} of {pulled.ref} {reason}, so they were not tested; its record says it
                    failed, and promote refuses it. Run the shard's test from a checkout of the candidate's
                    commit {pulled.revision[:12] or "(not labelled)"} (actions/checkout with fetch-depth: 0),
                    whose golden folders hold them.""",
                    result=run,
                )


def _write_record(session: Session, repository: RegistryRepository, record: ShardResult, junit: str) -> None:
    """The shard's result, passed or failed, with its JUnit XML, written to the registry."""
    session.step(
        "golden-record",
        session.console.golden_recorded,
        steps.write_golden_record,
        repository,
        record,
        junit=_read(junit),
    )


def _golden_cases_of(model_repository: Path, revision: str, scratch: Path, session: Session) -> Path:
    """The model repository as committed at the candidate's revision: its golden cases are the
    ones the candidate is held to; the working tree when git does not hold that commit."""
    try:
        found = checkout_at(model_repository, revision, scratch)
    except (Refused, UsageError, OSError):
        found = None
    if found is None:
        session.console.warning(
            f"the candidate's commit {revision[:12] or '(not labelled)'} is not in this "
            f"checkout; its golden cases are taken from {model_repository} as it is"
        )
        return model_repository
    return found


def _cases(run: object) -> tuple[dict, ...]:
    cases = getattr(run, "cases", None) or ()
    return tuple({"case": c.case, "passed": c.passed} for c in cases)


def _first_sentence(text: str, limit: int = 300) -> str:
    first = " ".join(text.split()).split(". ", 1)[0]
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _read(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None
