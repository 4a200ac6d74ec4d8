"""Lines of a fanned-out release (docs/fan-out.md): the shards planned, the candidate staged,
reused or pulled, each shard's result, the candidate checked, promoted, and the older
candidates retained."""

from __future__ import annotations

from typing import Any  # a step's result, typed where it is made, above the console

from triton_release.console.core import ConsoleCore


class FanoutLines(ConsoleCore):
    def shards_planned(self, result: Any) -> None:
        for shard in result.shards:
            loads = (
                f", also loads {', '.join(m for m in shard.load if m not in shard.models)}"
                if len(shard.load) > len(shard.models)
                else ""
            )
            self.line(
                f"{shard.name}: {len(shard.models)} models, {shard.cases} golden cases"
                f"{', needs a GPU runner' if shard.gpu else ''} ({', '.join(shard.models)}{loads})"
            )

    def candidate_pushed(self, result: Any) -> None:
        candidate = result.candidate
        self.line(
            f"staged {candidate.ref} as {candidate.repository}:{result.tag} (release "
            f"{candidate.version or 'none'} once every shard passed); {result.layers_uploaded} layers "
            f"uploaded, {result.layers_present} already in the registry"
        )

    def candidate_reused(self, result: Any) -> None:
        if result is not None:
            candidate = result.candidate
            self.line(
                f"{candidate.repository}:{result.tag} was staged from this commit and base before: reused "
                f"{candidate.ref}, {len(candidate.shards)} shards (nothing built, nothing pushed)"
            )

    def candidate_pulled(self, result: Any) -> None:
        self.line(f"pulled {result.ref} (built from {result.revision[:12] or 'an unlabelled commit'})")

    def golden_recorded(self, result: Any) -> None:
        self.line(
            f"{result.shard}: {'passed' if result.passed else 'FAILED'} ({result.cases} cases), recorded as "
            f"{result.repository}:{result.tag}"
        )

    def candidate_checked(self, result: Any) -> None:
        records = dict(result.results)
        for shard in result.candidate.shards:
            record = records.get(shard.name)
            state = (
                "no record"
                if record is None
                else "record of another candidate"
                if record.candidate != result.candidate.digest
                else "passed"
                if record.passed
                else f"FAILED ({', '.join(record.failed_cases) or record.reason or 'before any case'})"
            )
            self.line(f"{shard.name}: {state} ({', '.join(shard.models)})")
        if result.ok:
            self.line(
                f"{result.candidate.ref}: every shard passed, covering the changed models "
                f"({len(result.candidate.changed)}); planned as {result.candidate.version}"
            )

    def commit_planned(self, result: Any) -> None:
        """The release commit promote --commit makes: the version folders it adds to the candidate's
        commit. Not a change plan: the candidate's version and models are its labels'."""
        for warning in result.warnings:
            self.warning(warning)
        prefix = result.found.prefix
        for bump in result.bumps:
            self.line(
                f"{prefix}/{bump.model}/{bump.to_version}: new version folder for the release commit "
                f"(version {bump.from_version} restored to its released contents)"
            )
        for item in result.carried:
            self.line(f"{prefix}/{item.model}/{item.version}: carried from {item.release} into the release commit")
        if not result.bumps and not result.carried:
            self.line("the release commit adds no version folder: the candidate's commit holds every one it ships")

    def promoted(self, result: Any) -> None:
        again = " (X.Y.Z was this candidate already: the other tags were finished)" if result.resumed else ""
        self.line(
            f"released {result.repository}:{result.version} ({result.digest}){again}; tags "
            f"{', '.join(result.tags)} (the channel pointed at {result.channel_before or 'nothing'} before)"
        )

    def candidates_retained(self, result: Any) -> None:
        for tag in result.deleted:
            self.line(f"deleted {result.repository}:{tag}, a candidate older than the release, and its records")
        if result.released:
            many = len(result.released) > 1
            self.line(
                f"kept {len(result.released)} older candidate tag{'s' if many else ''} "
                f"({', '.join(result.released[:3])}{', ...' if len(result.released) > 3 else ''}): "
                f"{'releases are their manifests' if many else 'a release is its manifest'}, which deleting "
                "would delete"
            )
