"""Whether a staged candidate may become release X.Y.Z (`check_candidate`): its shards' shard
results (registry/candidate/shard_results.py) reviewed against its plan (`review`). Each shard needs a passing
record for this very digest that ran every golden case its plan holds of each of its models, and
together they must cover every changed model; a model set aside for needing a GPU the runner
lacked ships untested only when `gpu_models` is "test". Otherwise it is refused, naming every shard
at fault, with the fix (`refusal`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from triton_release.contract import shard_result_tag
from triton_release.errors import Refused
from triton_release.history.releases import parse_version
from triton_release.registry.candidate.labels import Candidate, read_candidate
from triton_release.registry.candidate.shard_results import ShardResult, read_shard_result
from triton_release.registry.client import RegistryRepository

log = logging.getLogger("triton_release")


@dataclass(frozen=True)
class CandidateCheck:
    """Each shard of a candidate with its result (None: none found), and what stops the promote."""

    candidate: Candidate
    results: tuple[tuple[str, ShardResult | None], ...]
    problems: tuple[str, ...]
    untested: tuple[tuple[str, str], ...] = ()  # (model, why): accepted to ship untested (gpu_models "test")

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        found = dict(self.results)
        shards = []
        for shard in self.candidate.shards:
            record = found.get(shard.name)
            shards.append(
                {
                    "name": shard.name,
                    "models": list(shard.models),
                    "record": shard_result_tag(self.candidate.digest, shard.name),
                    "found": record is not None,
                    "passed": bool(record and record.passed and record.candidate == self.candidate.digest),
                    "failed_cases": record.failed_cases if record else [],
                    "cases_planned": shard.cases,
                    "cases_run": len(record.cases) if record else 0,
                }
            )
        return {
            "candidate": self.candidate.ref,
            "planned_version": self.candidate.version or None,
            "revision": self.candidate.revision,
            "base": self.candidate.base or None,
            "changed_models": self.changed_models,
            "tested_models": list(self.candidate.changed),
            "shards": shards,
            "problems": list(self.problems),
            "shipped_untested": dict(self.untested),
        }

    @property
    def changed_models(self) -> list[str]:
        """The models whose files changed, as a release's `changed_models` says (a candidate staged
        before the label: the models it tested)."""
        found = self.candidate.changed_models
        return sorted(found if found is not None else self.candidate.changed)

    def facts(self) -> dict:
        return {"candidate": self.candidate.ref, "changed_models": self.changed_models}


def problems(
    candidate: Candidate, records: dict[str, ShardResult | None], version: str, gpu_models: str = "require"
) -> list[str]:
    """What stops `candidate` from becoming release `version`, naming every shard at fault; []
    when nothing does. `gpu_models` "test" accepts models set aside for needing a GPU (`review`)."""
    return review(candidate, records, version, gpu_models)[0]


def _untested_text(model: str, ran: int, planned: int, why: str) -> str:
    cases = f"ran {ran} of {planned} planned golden case{'s' if planned != 1 else ''}"
    return f"{model} ({'needs a GPU: ' + why + '; ' if why else ''}{cases})"


def review(
    candidate: Candidate, records: dict[str, ShardResult | None], version: str, gpu_models: str = "require"
) -> tuple[list[str], list[tuple[str, str]]]:
    """What stops `candidate` from becoming release `version`, and the models that ship untested
    because `gpu_models` is "test" and their shard's runner had no GPU: (model, why)."""
    found: list[str] = []
    accepted: list[tuple[str, str]] = []
    if version != candidate.version:
        found.append(
            f"--version {version} is not the candidate's planned version "
            f"{candidate.version or '(none: it has no version label)'}"
        )
    missing = [shard.name for shard in candidate.shards if records.get(shard.name) is None]
    if missing:
        found.append(
            f"no record for {', '.join(missing)} (the test job of {'that shard' if len(missing) == 1 else 'those shards'} "
            "did not run or did not finish)"
        )
    covered: set[str] = set()
    explained: set[str] = set()
    for shard in candidate.shards:
        record = records.get(shard.name)
        if record is None:
            pass
        elif record.candidate != candidate.digest:
            found.append(f"the record of {shard.name} is for {record.candidate}, another candidate")
        elif record.shard != shard.name:
            found.append(f"the record under {shard_result_tag(candidate.digest, shard.name)} is {record.shard}'s")
        elif not record.passed:
            failed = record.failed_cases
            found.append(
                f"{shard.name} failed: {', '.join(failed)}"
                if failed
                else f"{shard.name} failed: {record.reason}"
                if record.reason
                else f"{shard.name} failed before any case failed (a model did not load, or the test stopped)"
            )
        elif (planned := shard.case_counts()) is None:
            found.append(
                f"the plan of {shard.name} does not say how many golden cases of each model it must run "
                "(the candidate was staged by an earlier triton-release)"
            )
        else:
            short = record.untested(planned)
            refused = [u for u in short if not (u[3] and gpu_models == "test")]  # u[3]: the GPU it needs
            accepted += [(model, why) for model, _, _, why in short if why and gpu_models == "test"]
            if refused:
                found.append(f"{shard.name} left {', '.join(_untested_text(*u) for u in refused)} untested")
            covered.update(m for m in record.models if m not in {u[0] for u in refused})
            explained.update(u[0] for u in refused)
            continue
        explained.update(shard.models)
    uncovered = sorted(set(candidate.changed) - covered - explained)
    if uncovered:
        found.append(
            f"no passing record covers the changed model{'s' if len(uncovered) > 1 else ''} {', '.join(uncovered)}"
        )
    return found, accepted


def refusal(check: CandidateCheck) -> Refused:
    candidate = check.candidate
    fixes = []
    if any(not p.startswith("--version") for p in check.problems):
        fixes.append(
            f"run the test job of each shard named again (`triton-release test --image {candidate.ref} "
            "--shard NAME`) from a checkout of the candidate's commit, or stage the commit again"
        )
    if any("needs a GPU" in p for p in check.problems):
        fixes.append(
            "test a shard that needs a GPU on a runner with one (--gpus all; its `gpu` in the stage's "
            "`shards` output says so), or accept its models shipping untested with gpu_models test"
        )
    if candidate.version and any(p.startswith("--version") for p in check.problems):
        fixes.append(f"promote it as --version {candidate.version}")
    fix = "; ".join(fixes) or "stage the commit again"
    return Refused(
        f"""
        {candidate.ref} is not promoted: {"; ".join(check.problems)}. Nothing was tagged. To release it,
        {fix}.""",
        result=check,
    )


def check_candidate(
    registry: RegistryRepository, digest: str, version: str, gpu_models: str = "require"
) -> CandidateCheck:
    """The candidate and its shards' records; refused, naming every problem, unless they allow
    the candidate to become release `version`. `gpu_models` "test": models set aside for needing
    a GPU ship untested, with a warning naming them."""
    parse_version(version)
    candidate = read_candidate(registry, digest)
    records = {shard.name: read_shard_result(registry, digest, shard.name) for shard in candidate.shards}
    found, untested = review(candidate, records, version, gpu_models)
    check = CandidateCheck(candidate, tuple(records.items()), tuple(found), tuple(untested))
    if not check.ok:
        raise refusal(check)
    for model, why in untested:
        log.warning(
            f"{model} ships untested in {version}: it needs a GPU ({why}) and its shard ran on a runner "
            "without one; gpu_models test accepts that"
        )
    return check
