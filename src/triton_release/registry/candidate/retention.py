"""After a promote, the candidates older than the release are deleted with their shard results
and their evidence (`retain_candidates`), except the newest `keep` of them and any whose manifest a
release is: the registry deletes by digest, which would delete that release too, so such a
candidate keeps its tag. Deleting is cleanup: a registry that refuses it is a warning, never a
failure. (A release's own retention: registry/publish.py.)"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from triton_release.contract import CREATED_LABEL, is_candidate_tag, is_release_tag, parse_shard_result_tag
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.registry import attestations
from triton_release.registry.client import Manifest, RegistryRepository

log = logging.getLogger("triton_release")


@dataclass(frozen=True)
class CandidateRetention:
    repository: str
    keep: int
    deleted: tuple[str, ...]  # candidate tags deleted (their manifests)
    results: tuple[str, ...]  # their shard results, deleted
    released: tuple[str, ...]  # older candidate tags left: a release is their manifest
    warning: str = ""  # why deleting stopped part way ("" when it did not)
    evidence: tuple[str, ...] = ()  # their evidence (provenance and SBOM from the stage), deleted

    def to_json(self) -> dict:
        data = {
            "repository": self.repository,
            "keep_candidates": self.keep,
            "deleted": list(self.deleted),
            "records_deleted": list(self.results),
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
    except the newest `keep` of them, with their shard results. A candidate whose manifest a release
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
        results = {tag: found[0] for tag in tags if (found := parse_shard_result_tag(tag))}  # tag -> candidate
        for _, tag, digest in sorted(doomed):
            registry.delete(digest)
            deleted.append(tag)
            for result in sorted(t for t, candidate in results.items() if candidate == digest):
                result_digest = registry.digest(result)
                if result_digest is not None:
                    registry.delete(result_digest)
                gone.append(result)
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
