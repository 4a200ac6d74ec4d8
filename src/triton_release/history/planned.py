"""What `changes` finds between two commits and plans for a release: the change set, its bumps,
the kind of release it makes and, for a release, the version and the record of released versions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from triton_release.contract import RELEASED_VERSIONS_LABEL
from triton_release.history import released_versions, releases
from triton_release.history.bump import Carried, FolderBump, Written
from triton_release.history.changes import ChangeSet


@dataclass(frozen=True)
class VersionPlan:
    previous: str | None
    previous_from: str  # registry | git tag | none
    version: str | None  # None: nothing to release


@dataclass(frozen=True)
class ChangesResult:
    found: ChangeSet
    bumps: tuple[FolderBump, ...]
    kind: releases.ReleaseKind
    base_from: str
    plan: VersionPlan | None = None  # release only: the version the change makes
    carried: tuple[Carried, ...] = ()  # released versions written from the registry's record
    # release only: model -> version -> git tree of the image it builds (history/released_versions.py)
    record: Mapping[str, Mapping[int, str]] = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()  # how the base was found, where that needed saying (a fetch, a moved tag)
    # what the checkout holds in the model repository that no commit does: left out of the change
    uncommitted: tuple[str, ...] = ()

    @property
    def to_test(self) -> list[str]:
        return self.found.to_test

    @property
    def released_before(self) -> str | None:
        """The release whose image's environments the new ones are compared with: the previous
        release, when the registry names it (None for a first release, or one the registry does not
        hold)."""
        assert self.plan is not None
        return self.plan.previous if self.plan.previous_from == "registry" else None

    @property
    def new_versions(self) -> tuple[str, ...]:
        """The models whose new version is compared with the one before (drift): bumped, given a
        new version folder, or added (reported as having none before). Nothing on a first release."""
        if self.found.base is None:
            return ()
        return tuple(
            sorted(
                {b.model for b in self.bumps}
                | {
                    name
                    for name, change in self.found.models.items()
                    if change.status == "added" or change.added_versions
                }
            )
        )

    def with_environment_changes(self, changed: Iterable[str], version: str | None) -> tuple[list[str], str | None]:
        """The models to test and the version, once the models whose environment `changed` count as
        changed: tested, not bumped, and at least a patch release."""
        extra = [m for m in changed if m not in self.to_test]
        if extra and version is None:
            assert self.plan is not None and self.plan.previous is not None
            previous = releases.parse_version(self.plan.previous, "the previous release")
            version = str(releases.next_version(previous, "patch"))
        return [*self.to_test, *extra], version

    @property
    def writes(self) -> list[Written]:
        """Every version folder the bump writes: the new versions, and the carried ones."""
        return [*self.bumps, *self.carried]

    def record_label(self) -> dict[str, str]:
        record = {m: dict(vs) for m, vs in self.record.items()}
        return {RELEASED_VERSIONS_LABEL: released_versions.label(record)} if self.record else {}

    def to_json(self) -> dict:
        data = {
            "base": self.found.base,
            "base_from": self.base_from,
            "head": self.found.head,
            "changes": self.found.to_json(),
            "bumps": [b.to_json() for b in self.bumps],
            "release": self.kind.to_json(),
            "carried": [c.to_json() for c in self.carried],
            "warnings": list(self.warnings),
            "uncommitted": list(self.uncommitted),
        }
        if self.plan is not None:
            data.update(
                {
                    "previous_version": self.plan.previous,
                    "previous_from": self.plan.previous_from,
                    "version": self.plan.version,
                }
            )
        return data

    def facts(self) -> dict:
        facts: dict = {"changed_models": sorted(self.found.models)}
        if self.plan is not None:
            facts["version"] = self.plan.version
        return facts
