"""What refuses a new model version besides its golden cases: its drift from the version before
(models/drift.py) and its latency beside it (models/latency/). One group of settings, built once
(`from_settings`) and passed whole to the test, as settings.ServerOptions is for the server."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_release.models.latency import LatencyOptions
    from triton_release.settings.options import Settings


@dataclass(frozen=True)
class GateOptions:
    max_drift: float | None = None  # refuse a new version this far (relative) from its previous one
    latency: LatencyOptions | None = None  # measure new versions against their previous one; None: not at all

    @classmethod
    def from_settings(cls, settings: Settings, env: Mapping[str, str]) -> GateOptions:
        """The gates the settings ask for; the latency is measured only with a bound or `measure_latency`
        (LatencyOptions.measure), and refused only past its bound."""
        from triton_release.models.latency import LatencyOptions  # perf_analyzer's options: only when testing

        return cls(settings.max_drift, LatencyOptions.from_settings(settings, env))


NO_GATES = GateOptions()
