"""Lines of the image and what the registry holds of it: per-model environments, signatures and
the build; the push and its evidence; tags, retention and rollbacks."""

from __future__ import annotations

from typing import Any  # a step's result, typed where it is made, above the console

from triton_release.console.core import ConsoleCore
from triton_release.contract import KINDS
from triton_release.progress import size


class ImageLines(ConsoleCore):
    def environments(self, result: Any) -> None:
        envs = result.environments
        if len(envs.by_model) > 10:
            self.line(
                f"{len(envs.by_model)} models in their own environments, of {len(envs.distributions)} "
                "distributions (the report lists them)"
            )
        else:
            for model, env in sorted(envs.by_model.items()):
                packages = ", ".join(f"{name} {version}" for name, version in sorted(env.packages.items()))
                self.line(f"{model}: its own environment, {packages or 'no packages'}")
        for model in result.changed:
            self.line(f"{model}: environment changed since {result.compared_with}: tested, not bumped")

    def pulled(self, result: Any) -> None:
        self.line(result.summary())

    def signatures(self, result: Any) -> None:
        self.line(
            f"auto-complete models' signatures, as served, labelled ({', '.join(sorted(result.signatures))}); "
            f"release {result.version} ({result.kind.kind})"
        )

    def built(self, result: Any) -> None:
        for warning in result.warnings:
            self.warning(warning)
        self.line(result.summary())

    def pushed(self, result: Any) -> None:
        self.line(
            f"pushed {result.repository}:{result.version} ({result.digest}); {result.layers_uploaded} layers "
            f"uploaded, {result.layers_mounted + result.layers_present} already in the registry"
        )
        during = result.uploaded_during_tests
        if result.pushed_by == "registry":
            self.line(
                f"its {during.blobs} new layers ({size(during.bytes)}) went up while the image was loaded "
                "and tested; the manifest was written after they passed"
            )
        elif during is not None and during.missing and during.missing != "stopped":
            self.line(
                f"pushed through the Docker daemon, not with the blobs uploaded during the tests: {during.missing}"
            )

    def unreferenced_blobs(self, result: Any) -> None:
        self.warning(
            f"{result.blobs} blobs ({size(result.bytes)}) uploaded while the image was loaded and tested "
            "are named by no manifest: nothing was tagged, and the registry's garbage collection removes them"
        )

    def evidence(self, result: Any) -> None:
        kinds = ", ".join(KINDS.get(layer.predicate_type, layer.predicate_type) for layer in result.layers)
        how = " (its golden cases run again: the run that pushed it stopped before)" if result.how == "rerun" else ""
        self.line(
            f"evidence of {result.repository}@{result.digest}{how}: {kinds} as "
            f"{result.repository}:{result.tag} ({result.bytes} bytes), {result.signed_by}"
        )
        if result.signing == "none":
            self.warning(
                "the evidence is unsigned: give a signing key (--signing-key, the action's signing-key) "
                "so that `triton-release verify --key` and admission policies can trust it"
            )

    def evidence_checked(self, result: Any) -> None:
        for found in result.found:
            state = "verified" if not found.problems else "; ".join(found.problems)
            self.line(f"{found.predicate_type}: {state}")
        if result.ok:
            self.line(
                f"the evidence of {result.repository}@{result.digest} verifies with {result.key}: "
                f"{len(result.found)} statements, every golden case passed, the Test Results say pass"
            )

    def tagged(self, result: Any) -> None:
        self.line(
            f"tags {', '.join(result.tags)} -> {result.version} (the channel pointed at "
            f"{result.channel_before or 'nothing'} before)"
        )

    def tidied(self, result: Any) -> None:
        """What the release removed from the Docker daemon, what it kept for the next build, and what
        it left there (an image another tag or a container still holds)."""
        gone = [*result.untagged, *(image[:19] for image in result.removed)]
        if gone or result.kept:
            removed = f"removed {', '.join(gone)}" if gone else "nothing else to remove"
            kept = f"; kept {result.kept} (the next build's layers)" if result.kept else ""
            self.line(f"daemon: {removed}{kept}")
        for image, why in result.left:
            self.line(f"daemon: left {image[:40]}: {why}")

    def retained(self, result: Any) -> None:
        for version in result.deleted:
            self.line(f"deleted {result.repository}:{version} (--keep {result.keep})")
        for version, channels in result.kept_for:
            named = ", ".join(channels)
            self.line(
                f"kept {result.repository}:{version} beyond --keep {result.keep}: the channel"
                f"{'s' if len(channels) > 1 else ''} {named} point{'' if len(channels) > 1 else 's'} at it "
                "(a channel's current release is never deleted; move the channel to delete it)"
            )

    def rolled_back(self, result: Any) -> None:
        self.line(
            f"{result.repository}:{result.channel} -> {result.version} ({result.digest}); it pointed at "
            f"{result.previous_digest or 'nothing'} before (roll forward with that digest)"
        )

    def model_rolled_back(self, result: Any) -> None:
        self.line(f"{result.server}: {result.model} now serves version {result.version} only")
