"""The staged candidate as the later stages read it back: its reference `REPO@sha256:<digest>`
(`parse_reference`) and the `Candidate` its labels describe (`read_candidate`): the planned
version, the commit it was built from and the base of its bump, the shard plan, the changed
models, the models given a new version, the version folders it holds, the drift it cannot
measure. (Staging and pulling it: registry/candidate/stage.py; the labels' names: contract.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field

from triton_release.contract import (
    BASE_LABEL,
    CHANGED_LABEL,
    CHANGED_MODELS_LABEL,
    CREATED_LABEL,
    DRIFT_UNMEASURABLE_LABEL,
    NEW_VERSIONS_LABEL,
    RELEASED_VERSIONS_LABEL,
    REVISION_LABEL,
    SHARDS_LABEL,
    VERSION_LABEL,
    parse_digest_ref,
)
from triton_release.errors import Refused, UsageError
from triton_release.history.released_versions import ReleasedVersions
from triton_release.history.released_versions import parse as parse_released_versions
from triton_release.models.shards import (
    Shard,
    changed_from_label,
    new_versions_from_label,
    shards_from_label,
    unmeasurable_from_label,
)
from triton_release.registry.client import Manifest, RegistryRepository


def parse_reference(ref: str) -> tuple[str, str]:
    """The --candidate REPO@sha256:<64 hex> -> (REPO, digest); refused (a usage error) when it is
    not one."""
    found = parse_digest_ref(ref or "")
    if found is None:
        raise UsageError(f"""
            --candidate {ref!r}: give the candidate as REPO@sha256:<64 hex digits>, the `candidate` output of
            `triton-release stage`.""")
    return found


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
    changed: tuple[str, ...]  # the models the shards' results must cover
    manifest: Manifest | None = field(default=None, repr=False, compare=False)
    new_versions: tuple[str, ...] | None = None  # the models given a new version (drift); None: not labelled
    # model -> version -> git tree of every version folder it holds (history/released_versions.py); None: not labelled
    released_versions: ReleasedVersions | None = field(default=None, repr=False, compare=False)
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
            parse_released_versions(labels.get(RELEASED_VERSIONS_LABEL)),
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
