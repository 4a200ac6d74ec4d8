"""Promote, stage and candidate tests: a release over many runners, its candidate staged, tested in
shards with their golden records, and promoted to the release."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.contract import REVISION_LABEL
from triton_release.errors import Refused, UsageError
from triton_release.history.bump import check_working_tree
from triton_release.history.git import Git
from triton_release.history.planned import ChangesResult
from triton_release.models.repository import Repository
from triton_release.steps.changes import changes
from triton_release.steps.commit import as_recorded, holds_shipped_bump

if TYPE_CHECKING:
    from triton_release.models.shards import Shard
    from triton_release.registry.candidate import CandidateCheck
    from triton_release.registry.candidate.shard_results import ShardResult
    from triton_release.registry.client import RegistryRepository


# -- promote: the bump a staged candidate shipped, for its release commit -----------------------


def plan_commit(root: Path, checked: CandidateCheck) -> ChangesResult:
    """The bump the candidate shipped, recomputed from its base and revision labels, checked
    against the working tree before anything is tagged: the candidate's commit must be checked
    out, and the version folders to bump hold nothing git does not (or this very bump)."""
    candidate = checked.candidate
    git = Git(Git(root).toplevel())
    if not candidate.revision:
        raise Refused(
            f"{candidate.ref} has no {REVISION_LABEL} label, so its bump cannot be redone for "
            "--commit. Promote it without --commit, or stage the commit again."
        )
    head = git.text("rev-parse", "HEAD")
    if head != candidate.revision:
        raise UsageError(f"""
            --commit makes the release commit on the candidate's commit {candidate.revision[:12]}, and
            {head[:12]} is checked out. Check out {candidate.revision[:12]} (actions/checkout with ref:
            and fetch-depth: 0), or promote without --commit. Nothing was tagged.""")
    planned = (
        changes(root, candidate.base or None, head=candidate.revision)
        if candidate.released_versions is None
        else as_recorded(root, candidate.revision, candidate.released_versions, candidate.ref)
    )
    if not holds_shipped_bump(root, planned, candidate.ref):
        check_working_tree(planned.found, planned.writes, root)
    return planned


# -- stage and candidate tests: a release over many runners ------------------------------------


@dataclass(frozen=True)
class ShardPlan:
    shards: tuple[Shard, ...]

    def to_json(self) -> dict:
        return {"shards": [s.to_json() for s in self.shards]}

    def facts(self) -> dict:
        return {"shards": [s.matrix_entry() for s in self.shards]}


def plan_shards(
    root: Path | Repository, names: list[str], *, shards: int | None = None, max_models: int | None = None
) -> ShardPlan:
    from triton_release.models import shards as sharding

    repo = root if isinstance(root, Repository) else Repository.load(root)
    return ShardPlan(tuple(sharding.plan_shards(repo, names, shards=shards, max_models=max_models)))


@dataclass(frozen=True)
class RecordWritten:
    repository: str
    tag: str
    shard: str
    passed: bool
    cases: int

    def to_json(self) -> dict:
        return {
            "record": f"{self.repository}:{self.tag}",
            "shard": self.shard,
            "passed": self.passed,
            "cases": self.cases,
        }


def write_golden_record(
    registry: RegistryRepository, record: ShardResult, *, junit: bytes | None = None
) -> RecordWritten:
    """The shard's outcome, kept in the registry beside the candidate for `promote` to read."""
    from triton_release.registry.candidate.shard_results import write_shard_result

    tag = write_shard_result(registry, record, junit)
    return RecordWritten(str(registry), tag, record.shard, record.passed, len(record.cases))
