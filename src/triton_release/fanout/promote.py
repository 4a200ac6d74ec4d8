"""The last stage of a release over many runners, composed from the steps as `release` is.

`promote`: read the candidate and its shards' results (refused, naming every shard at
fault, before anything moves: a shard that ran fewer golden cases than its plan holds is at
fault, and so is one that left a model untested for lack of a GPU, unless `gpu_models` is
"test"); with `--commit`, redo the bump it shipped and check the working tree can take it; then
put the candidate's manifest under X.Y.Z and move the other tags, the channel last; commit and
tag the release; and delete the candidates older than it.

As in `release`, nothing is undone once X.Y.Z is in the registry: a rerun finishes the tags,
the commit and the retention.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release import steps
from triton_release.errors import UsageError
from triton_release.evidence import attach
from triton_release.evidence.statements import EvidenceOptions
from triton_release.history import releases
from triton_release.history.commit import refuse_pending
from triton_release.registry import candidate
from triton_release.release import one_at_a_time
from triton_release.session import Session
from triton_release.settings import PublishOptions

if TYPE_CHECKING:
    from triton_release.registry.client import RegistryRepository
    from triton_release.settings import Settings


def gpu_policy(settings: Settings) -> str:
    """What promote does with models a shard set aside for lacking a GPU: refuse ("require"),
    unless the user set gpu_models: test themselves (its default, test, is for testing on the CPU,
    not for shipping untested)."""
    return settings.gpu_models if settings.sources.get("gpu_models", "default") != "default" else "require"


@dataclass(frozen=True)
class PromoteRequest:
    repository: RegistryRepository  # the candidate's repository, with its credentials
    digest: str  # the candidate's manifest digest
    version: str
    publish: PublishOptions  # the channel moved to it
    keep_candidates: int = 0  # older candidates kept besides the released one
    commit: bool = False
    model_repository: Path | None = None  # with commit: the checkout of the candidate's commit
    gpu_models: str = "require"  # "test": models a shard set aside for lacking a GPU ship untested
    evidence: EvidenceOptions = (
        EvidenceOptions()
    )  # how the golden results added to the evidence are signed, who promoted it


def run_promote(request: PromoteRequest, session: Session) -> None:
    releases.parse_version(request.version)  # every argument checked before the first request
    releases.check_channel(request.publish.channel)
    if request.keep_candidates < 0:
        raise UsageError(f"--keep-candidates {request.keep_candidates}: give 0 or more.")
    if request.gpu_models not in ("test", "require"):
        raise UsageError(f"gpu_models {request.gpu_models!r}: give test or require.")
    console = session.console
    checked = session.step(
        "records",
        console.candidate_checked,
        candidate.check_candidate,
        request.repository,
        request.digest,
        request.version,
        request.gpu_models,
    )
    planned = None
    if request.commit:
        assert request.model_repository is not None  # with commit: the CLI and the action give it
        refuse_pending(request.model_repository)
        planned = session.step("changed", console.commit_planned, steps.plan_commit, request.model_repository, checked)
    with one_at_a_time(request.repository, console):
        promoted = session.step(
            "promote",
            console.promoted,
            candidate.promote,
            request.repository,
            checked,
            request.version,
            request.publish.channel,
            tags=request.publish.tags,
        )
    # -- published: finished forward by a rerun, never rolled back -----------------------------
    evidence = request.evidence
    session.step(
        "evidence",
        console.evidence,
        attach.promote,
        request.repository,
        promoted.digest,
        promoted.version,
        records=[r for _, r in checked.results if r is not None],
        untested=checked.untested,
        signing=evidence.signing,
        invocation=evidence.invocation,
        root=request.model_repository,
    )
    if planned is not None:
        assert request.model_repository is not None
        session.step(
            "commit",
            console.committed,
            steps.commit_shipped,
            request.model_repository,
            request.version,
            planned,
            f"{request.repository}:{request.version}",
        )
    session.step(
        "retain-candidates",
        console.candidates_retained,
        candidate.retain_candidates,
        request.repository,
        promoted.digest,
        request.keep_candidates,
    )
