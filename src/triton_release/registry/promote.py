"""Promote: a staged candidate becomes release X.Y.Z once every shard of it passed.

The candidate is an image in the release repository under `candidate-<sha12>`, known by its
manifest digest. Its labels carry what promote needs: the shard plan, the changed models, the
planned version, the commit it was built from and the base of its bump. Each shard's test job
left a golden record beside it (registry/records.py). Promote reads them all and refuses, naming
every shard at fault, unless each shard has a passing record for this very digest that ran every
golden case its plan holds of each of its models, and together they cover every changed model. A
model set aside because it needs a GPU the runner lacked is untested, and refused too, unless the
promote's `gpu_models` is "test": then it ships untested, and the promote says so. Then the
candidate's manifest is put under X.Y.Z (never over another release's), and the moving tags
follow as `push` moves them, the channel last: no layer moves.

After a promote, candidates older than the release are deleted with their records, except the
newest `keep` of them and any whose manifest a release is: the registry deletes by digest, which
would delete that release too, so such a candidate keeps its tag.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field

from triton_release.contract import (
    BASE_LABEL,
    CHANGED_LABEL,
    CHANGED_MODELS_LABEL,
    CREATED_LABEL,
    DRIFT_UNMEASURABLE_LABEL,
    NEW_VERSIONS_LABEL,
    RECORD_TAG,
    RELEASED_VERSIONS_LABEL,
    REVISION_LABEL,
    SHARDS_LABEL,
    VERSION_LABEL,
    is_candidate_tag,
    record_tag,
)
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history import record as released_record
from triton_release.history.releases import is_release_tag, parse_version, versions_in
from triton_release.models.shards import (
    Shard,
    changed_from_label,
    new_versions_from_label,
    shards_from_label,
    unmeasurable_from_label,
)
from triton_release.registry import attestations
from triton_release.registry.client import Manifest, RegistryRepository
from triton_release.registry.publish import AlreadyReleased, released_facts, tag_release
from triton_release.registry.records import GoldenRecord, read_record

CANDIDATE_REF = re.compile(r"^(?P<repository>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")
log = logging.getLogger("triton_release")


def parse_reference(ref: str) -> tuple[str, str]:
    """REPO@sha256:<64 hex> -> (REPO, digest)."""
    match = CANDIDATE_REF.match(ref or "")
    if not match:
        raise UsageError(f"""
            --candidate {ref!r}: give the candidate as REPO@sha256:<64 hex digits>, the `candidate` output of
            `triton-release stage`.""")
    return match["repository"], match["digest"]


@dataclass(frozen=True)
class Candidate:
    """A staged image, as its labels describe it."""

    repository: str
    digest: str
    version: str  # the planned X.Y.Z
    revision: str  # the commit it was built from
    base: str  # the commit its bump started from ("" for a first release)
    created: str
    shards: tuple[Shard, ...]
    changed: tuple[str, ...]  # the models the shards' records must cover
    manifest: Manifest | None = field(default=None, repr=False, compare=False)
    new_versions: tuple[str, ...] | None = None  # the models given a new version (drift); None: not labelled
    # model -> version -> git tree of every version folder it holds (history/record.py); None: not labelled
    record: dict | None = field(default=None, repr=False, compare=False)
    # model -> why its drift cannot be measured here: its environment changed since the last release
    drift_unmeasurable: dict[str, str] = field(default_factory=dict, compare=False)
    # the models whose files changed (`changed` adds those tested for another reason); None: not labelled
    changed_models: tuple[str, ...] | None = None

    @property
    def ref(self) -> str:
        return f"{self.repository}@{self.digest}"

    @classmethod
    def from_labels(
        cls, repository: str, digest: str, labels: dict, created: str = "", manifest: Manifest | None = None
    ) -> Candidate:
        """The candidate its labels describe; refused when they hold no shard plan or changed models."""
        shards = shards_from_label(labels.get(SHARDS_LABEL))
        changed = changed_from_label(labels.get(CHANGED_LABEL))
        return cls(
            repository,
            digest,
            labels.get(VERSION_LABEL, ""),
            labels.get(REVISION_LABEL, ""),
            labels.get(BASE_LABEL, ""),
            labels.get(CREATED_LABEL, "") or created,
            tuple(shards),
            tuple(changed),
            manifest,
            new_versions_from_label(labels.get(NEW_VERSIONS_LABEL)),
            released_record.parse(labels.get(RELEASED_VERSIONS_LABEL)),
            unmeasurable_from_label(labels.get(DRIFT_UNMEASURABLE_LABEL)),
            new_versions_from_label(labels.get(CHANGED_MODELS_LABEL)),
        )


def read_candidate(registry: RegistryRepository, digest: str) -> Candidate:
    manifest = registry.manifest(digest)
    if manifest is None:
        raise Refused(f"""
            {registry}@{digest} does not exist: it was never staged there, or it was deleted after a newer
            release. Stage the commit again and promote the candidate it names.""")
    config = registry.image_config(digest)
    labels = (config.get("config") or {}).get("Labels") or {}
    return Candidate.from_labels(str(registry), digest, labels, str(config.get("created", "")), manifest)


@dataclass(frozen=True)
class CandidateCheck:
    """Each shard of a candidate with its record (None: none found), and what stops the promote."""

    candidate: Candidate
    records: tuple[tuple[str, GoldenRecord | None], ...]
    problems: tuple[str, ...]
    untested: tuple[tuple[str, str], ...] = ()  # (model, why): accepted to ship untested (gpu_models "test")

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        found = dict(self.records)
        shards = []
        for shard in self.candidate.shards:
            record = found.get(shard.name)
            shards.append(
                {
                    "name": shard.name,
                    "models": list(shard.models),
                    "record": record_tag(self.candidate.digest, shard.name),
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
    candidate: Candidate, records: dict[str, GoldenRecord | None], version: str, gpu_models: str = "require"
) -> list[str]:
    """What stops `candidate` from becoming release `version`, naming every shard at fault; []
    when nothing does. `gpu_models` "test" accepts models set aside for needing a GPU (`review`)."""
    return review(candidate, records, version, gpu_models)[0]


def _untested_text(model: str, ran: int, planned: int, why: str) -> str:
    cases = f"ran {ran} of {planned} planned golden case{'s' if planned != 1 else ''}"
    return f"{model} ({'needs a GPU: ' + why + '; ' if why else ''}{cases})"


def review(
    candidate: Candidate, records: dict[str, GoldenRecord | None], version: str, gpu_models: str = "require"
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
            found.append(f"the record under {record_tag(candidate.digest, shard.name)} is {record.shard}'s")
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
    records = {shard.name: read_record(registry, digest, shard.name) for shard in candidate.shards}
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


@dataclass(frozen=True)
class Promoted:
    """The candidate's manifest under X.Y.Z and the moving tags: the release is published."""

    repository: str
    version: str
    digest: str
    tags: tuple[str, ...]  # in the order written: X.Y.Z, X.Y, X, sha-<12 hex>, the channel last
    channel_before: str | None  # the digest the channel pointed at before: roll forward with it
    resumed: bool = False  # X.Y.Z was this candidate already (a rerun): the other tags were moved

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "version": self.version,
            "digest": self.digest,
            "image": f"{self.repository}:{self.version}",
            "tags": list(self.tags),
            "channel_digest_before": self.channel_before,
            "resumed": self.resumed,
        }

    def facts(self) -> dict:
        return released_facts(self.repository, self.version, self.digest)


def promote(registry: RegistryRepository, check: CandidateCheck, version: str, channel: str) -> Promoted:
    """Put the checked candidate's manifest under X.Y.Z, then X.Y, X, sha-<12> and the channel.
    An X.Y.Z of other contents is refused, and so is a version below a release the registry
    already has (its channel and moving tags would go back). X.Y.Z that is this candidate
    already (a promote stopped before the channel moved) is finished."""
    candidate = check.candidate
    release = parse_version(version)
    newer = [v for v in versions_in(registry.tags()) if v > release]
    existing = registry.digest(version)
    if existing is not None and existing != candidate.digest:
        raise AlreadyReleased(f"""
            {registry}:{version} already exists as {existing}, and released versions are immutable: nothing was
            tagged. Stage the commit again: it plans the next version.""")
    if newer:
        which = " (which is this candidate)" if existing else ""
        raise Refused(f"""
            {registry} already has release {newer[-1]}, newer than {version}{which}: promoting it would move
            {channel} and {release.major} back. Nothing was tagged. Stage the commit again: it plans the next
            version.""")
    manifest = candidate.manifest or registry.manifest(candidate.digest)
    if manifest is None:
        raise Refused(f"{candidate.ref} was deleted meanwhile: nothing was tagged. Stage the commit again.")
    if existing is None:
        registry.put_manifest(version, manifest)
    tagged = tag_release(registry, version, candidate.revision or None, channel, candidate.digest)
    return Promoted(
        str(registry), version, candidate.digest, (version, *tagged.tags), tagged.channel_before, existing is not None
    )


# -- retention of candidates -------------------------------------------------------------------


@dataclass(frozen=True)
class CandidateRetention:
    repository: str
    keep: int
    deleted: tuple[str, ...]  # candidate tags deleted (their manifests)
    records: tuple[str, ...]  # their records, deleted
    released: tuple[str, ...]  # older candidate tags left: a release is their manifest
    warning: str = ""  # why deleting stopped part way ("" when it did not)
    evidence: tuple[str, ...] = ()  # their evidence (provenance and SBOM from the stage), deleted

    def to_json(self) -> dict:
        data = {
            "repository": self.repository,
            "keep_candidates": self.keep,
            "deleted": list(self.deleted),
            "records_deleted": list(self.records),
            "kept_as_released": list(self.released),
            "evidence_deleted": list(self.evidence),
        }
        return {**data, "warning": self.warning} if self.warning else data


def _created(registry: RegistryRepository, manifest: Manifest, reference: str) -> str:
    """When an image was built: its created label, else its configuration's `created`."""
    if manifest.config_digest:
        try:
            config = json.loads(registry.blob(manifest.config_digest))
        except ValueError:
            config = {}
    else:  # an index: the first image's configuration
        config = registry.image_config(reference)
    config = config if isinstance(config, dict) else {}
    labels = (config.get("config") or {}).get("Labels") or {}
    return str(labels.get(CREATED_LABEL) or config.get("created") or "")


def retain_candidates(registry: RegistryRepository, released: str, keep: int = 0) -> CandidateRetention:
    """Delete the candidates built before the candidate `released` (a digest just promoted),
    except the newest `keep` of them, with their records. A candidate whose manifest a release
    is keeps its tag: deleting it would delete the release. Deleting is cleanup: a registry that
    refuses it (many do not delete through this API) is a warning, never a failure."""
    if keep < 0:
        raise UsageError(f"--keep-candidates {keep}: give 0 or more.")
    deleted: list[str] = []
    gone: list[str] = []
    kept: list[str] = []
    attested: list[str] = []
    try:
        tags = registry.tags()
        released_manifest = registry.manifest(released)
        since = _created(registry, released_manifest, released)[:19] if released_manifest is not None else ""
        older = []
        for tag in filter(is_candidate_tag, tags) if since else ():
            manifest = registry.manifest(tag)
            if manifest is None or manifest.digest == released:
                continue
            created = _created(registry, manifest, tag)[:19]
            if created < since:  # ISO-8601 UTC times compare as text; unknown ("") counts as oldest
                older.append((created, tag, manifest.digest))
        releases = {registry.digest(t) for t in tags if is_release_tag(t)} if older else set()
        kept = sorted(tag for _, tag, digest in older if digest in releases)
        doomed = sorted((c for c in older if c[2] not in releases), reverse=True)[keep:]
        records = {tag: match["hex"] for tag in tags if (match := RECORD_TAG.match(tag))}
        for _, tag, digest in sorted(doomed):
            registry.delete(digest)
            deleted.append(tag)
            for record in sorted(t for t, hex_ in records.items() if f"sha256:{hex_}" == digest):
                record_digest = registry.digest(record)
                if record_digest is not None:
                    registry.delete(record_digest)
                gone.append(record)
            evidence = attestations.delete(registry, digest)  # what its stage attached to it
            if evidence is not None:
                attested.append(evidence)
    except (InfrastructureError, Refused) as exc:
        warning = (
            f"old candidates of {registry} could not all be deleted ({exc.message}); they stay, and the "
            "next promote tries again"
        )
        log.warning(warning)
        return CandidateRetention(
            str(registry), keep, tuple(deleted), tuple(gone), tuple(kept), warning, tuple(attested)
        )
    return CandidateRetention(str(registry), keep, tuple(deleted), tuple(gone), tuple(kept), evidence=tuple(attested))
