"""Lines of the release's course on the source side: settings and validation, what changed, a
stopped run recovered, the bump and the commit built from, the lock on this machine, a release
not made or finished, the release commit and tag."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any  # Any: a step's result, typed where it is made, above the console

from triton_release.console.core import ConsoleCore

if TYPE_CHECKING:
    from triton_release.settings.options import Settings


class ReleaseLines(ConsoleCore):
    def settings(self, settings: Settings) -> None:
        for warning in settings.warnings:
            self.warning(warning)

    def validation(self, result: Any) -> None:
        for warning in result.warnings:
            self.warning(warning.message, warning)
        for problem in result.problems:
            self.problem(problem)
        if result.ok:
            self.line(f"{result.root}: {len(result.models)} models, {result.golden_cases} golden cases, no problems")

    def diagnosis(self, result: Any) -> None:
        """doctor's table: a row per check, each problem's fix under it."""
        width = max((len(check.name) for check in result.checks), default=0)
        for check in result.checks:
            self.line(
                f"{check.status.upper() if check.status == 'problem' else check.status:<11}  {check.name:<{width}}  {check.detail}"
            )
            if check.fix:
                self.line(f"{'':<11}  {'':<{width}}  fix: {check.fix}")
        problems = len(result.problems)
        self.line(
            "a release can run here"
            if not problems
            else f"{problems} problem{'s' * (problems != 1)}: a release cannot run here yet"
        )

    def changes(self, result: Any) -> None:
        found = result.found
        for warning in result.warnings:
            self.warning(warning)
        for name, change in sorted(found.models.items()):
            self.line(f"{name}: {change.status}; {'; '.join(change.reasons)}")
        for name in found.ensembles:
            self.line(f"{name}: ensemble using a changed model; tested, not bumped")
        for name in found.callers:
            self.line(f"{name}: calls a changed model (BLS); tested, not bumped")
        if result.uncommitted:
            self.warning(
                f"not committed, so left out of the change{'' if found.models else ' (no committed change was found)'}: "
                f"{', '.join(result.uncommitted)}. A release reads commits, not the working tree: commit them "
                "(git add, git commit) to release them"
            )
        if not found.models:
            self.line("no model changed" + (" in the commits compared" if result.uncommitted else ""))
        plan = result.plan
        if plan is None:
            self.line(f"release: {result.kind.kind or 'none'} ({'; '.join(result.kind.reasons)})")
        else:
            why = "".join(f"{reason}; " for reason in result.kind.reasons)
            self.line(
                f"release: {result.kind.kind or 'nothing'} -> {plan.version or '(none)'} "
                f"({why}previous: {plan.previous or 'none'}; base: {result.base_from})"
            )

    def recovered(self, result: Any) -> None:
        if result is None:
            return
        if result.action == "dropped":
            self.line(
                "a run left a journal of its bump that cannot be read: dropped; a bump it left in the working "
                "tree is recognised by its contents and undone if this run releases nothing"
            )
            return
        what = {
            "undone": "its bump was never published: undone",
            "kept": "its release was published: its bump is kept for the release commit",
            "tagged": "its release commit is there: tagged",
            "gone": "a checkout since removed it",
        }[result.action]
        self.line(
            f"a run ({result.owner}) was stopped during {result.phase} with its bump in "
            f"{', '.join(result.folders)}; {what}"
        )

    def bumped(self, result: Any) -> None:
        if result.found:
            self.line(
                f"the working tree holds this bump already ({', '.join(result.folders)}, exactly as it would "
                "write them): used as found, and left so"
            )
            return
        for bump in result.bumps:
            self.line(
                f"{result.prefix}/{bump.model}/{bump.to_version}: new version folder with the head contents; "
                f"version {bump.from_version} restored to its released contents"
            )
        for item in result.carried:
            where = f"{result.prefix}/{item.model}/{item.version}"
            self.line(
                f"{where}: carried from {item.release}, which shipped it "
                + (
                    "with other contents than the checkout holds (its bump was never committed)"
                    if item.at_head
                    else "and the checkout lacks it (its bump was never committed)"
                )
            )
        if not result.bumps:
            self.line("no version folder to bump")

    def exported(self, result: Any) -> None:
        if result.in_place:
            self.line(
                f"building and testing commit {result.commit[:12]} with the new version folders in place: "
                "the checkout is exactly that"
            )
        else:
            self.line(
                f"building and testing commit {result.commit[:12]} with the new version folders, unpacked"
                + (f" ({result.unpacked_because})" if result.unpacked_because else "")
            )
        if result.uncommitted:
            self.warning(f"not released, because not committed: {', '.join(result.uncommitted)}")

    def not_released(self, why: str) -> None:
        self.line(why)

    def waiting(self, holder: str) -> None:
        self.line(f"{holder} is running on this machine; waiting for it")

    def finished(self, result: Any) -> None:
        if result.tags:
            self.line(f"finished the interrupted release {result.version}: tags {', '.join(result.tags)}")

    def committed(self, result: Any) -> None:
        if result is None:
            return
        self.line(
            f"{'committed the new version folders and ' if result.committed else ''}tagged {result.tag} "
            f"({result.commit[:12]})"
        )
