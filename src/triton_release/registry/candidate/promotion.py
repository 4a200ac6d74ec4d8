"""Promote: a staged candidate becomes release X.Y.Z once every shard of it passed.

The candidate is an image in the release repository under `candidate-<sha12>`, known by its
manifest digest. Its labels carry what promote needs: the shard plan, the changed models, the
planned version, the commit it was built from and the base of its bump. Each shard's test job
left its shard result beside it (registry/candidate/shard_results.py). Promote reads them all and
refuses, naming every shard at fault, unless each shard has a passing result for this very digest
that ran every golden case its plan holds of each of its models, and together they cover every
changed model. A model set aside because it needs a GPU the runner lacked is untested, and refused
too, unless the promote's `gpu_models` is "test": then it ships untested, and the promote says so.
Then the candidate's manifest is put under X.Y.Z (never over another release's), and the moving
tags follow as `push` moves them, the channel last: no layer moves.

After a promote, candidates older than the release are deleted with their shard results, except
the newest `keep` of them and any whose manifest a release is: the registry deletes by digest,
which would delete that release too, so such a candidate keeps its tag (retention.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from triton_release.errors import Refused
from triton_release.history.releases import parse_version, versions_in
from triton_release.registry import ledger
from triton_release.registry.candidate.check import CandidateCheck
from triton_release.registry.client import RegistryRepository
from triton_release.registry.publish import AlreadyReleased, put_release, released_facts, tag_release


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


def promote(
    registry: RegistryRepository, check: CandidateCheck, version: str, channel: str, *, tags: str = "all"
) -> Promoted:
    """Put the checked candidate's manifest under X.Y.Z, then X.Y, X, sha-<12> and the channel
    (`tags` "version": sha-<12> alone).
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
    labels = registry.image_config(candidate.digest).get("config", {}).get("Labels") or {}
    if existing is None:
        ledger.intend(registry, version, candidate.revision, manifest.config_digest, candidate.digest)
        put_release(registry, version, manifest)
    ledger.enter(registry, version, labels, manifest.config_digest, candidate.digest)
    tagged = tag_release(registry, version, candidate.revision or None, channel, candidate.digest, tags=tags)
    return Promoted(
        str(registry), version, candidate.digest, (version, *tagged.tags), tagged.channel_before, existing is not None
    )
