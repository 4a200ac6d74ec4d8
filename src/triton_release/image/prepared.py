"""What a release image is built on, once resolved: the base, the stub, each model's environment,
and the models whose environment changed since the last release."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_release.image.base import BaseImage
    from triton_release.image.environments import Environments
    from triton_release.image.stub import StubChoice


@dataclass(frozen=True)
class Prepared:
    """What the image is built on: the base, the stub, and each model's environment."""

    base: BaseImage
    stub: StubChoice
    environments: Environments
    changed: tuple[str, ...] = ()  # models whose environment differs from the last release's
    compared_with: str = ""  # that release, "" when none was compared
    previous_labels: dict = field(default_factory=dict, repr=False)  # that release's image labels

    @property
    def drift_unmeasurable(self) -> dict[str, str]:
        """Models whose drift this image cannot measure: their environment changed since the last
        release, so version N would answer with N+1's environment, not the one it was released with."""
        return {
            m: f"its environment changed since {self.compared_with}: version N would run with the new "
            "environment here, so its drift cannot be measured"
            for m in self.changed
        }

    def to_json(self) -> dict:
        return {
            "environments": self.environments.to_json(),
            "environment_changed_models": list(self.changed),
            "compared_with": self.compared_with,
        }

    def facts(self) -> dict:
        return {"environment_changed_models": list(self.changed)} if self.changed else {}
