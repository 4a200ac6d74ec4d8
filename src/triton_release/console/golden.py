"""Lines of a golden run: each case passed or failed, untested models, waves, memory, the drift
from the version before and the latency gate; and the answers `record` wrote."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any  # a step's result, typed where it is made, above the console

from triton_release.console.core import ConsoleCore
from triton_release.console.escaping import escape_controls
from triton_release.problems import Problem


class GoldenLines(ConsoleCore):
    def golden_run(self, run: Any) -> None:
        on_cpu = set(getattr(run, "on_cpu", ()))
        for case in run.cases:  # a case's message holds the model's own text: kept on its line
            where = ", tested on CPU" if case.case.split("/", 1)[0] in on_cpu else ""
            self.line(
                f"{'PASS' if case.passed else 'FAIL'} {case.case} ({case.latency_ms:.1f} ms{where})"
                + (f": {escape_controls(case.message)}" if case.message else "")
            )
        for name in run.untested:
            self.warning(f"{name} has no golden cases; it loaded, nothing more is proven")
        for name, why in getattr(run, "needs_gpu", ()):
            self.warning(f"{name} was not tested: needs a GPU: {why}")
        if on_cpu:
            self.line(f"tested on CPU (KIND_GPU instance groups loaded as KIND_CPU): {', '.join(sorted(on_cpu))}")
        for case in run.failed:
            self.problem(Problem(Path(case.path), f"{case.case}: {escape_controls(case.message)}"))
        if len(run.waves) > 1:
            for wave in run.waves:
                over = " (more than max_loaded: an ensemble and what it needs)" if wave.oversized else ""
                self.line(
                    f"wave {wave.index}/{len(run.waves)}: {len(wave.loaded)} models loaded{over}, "
                    f"{wave.cases} cases, {wave.seconds:.1f} s"
                )
        if run.peak_memory_bytes:
            self.line(f"server peak memory: {run.peak_memory_bytes / (1 << 20):.0f} MiB")
        if run.passed:
            self.line(f"{len(run.cases)} golden cases passed in {run.image}")
        self.drift(getattr(run, "drift", ()))
        self.latency(getattr(run, "latency", None))

    def drift(self, drifts: Any) -> None:
        """One line per model with a new version: its largest difference from the version before."""
        for found in drifts:  # notes and output names come from the server: each line kept one line
            if not found.compared:
                self.line(escape_controls(f"drift {found.model}: not compared: {found.note}"))
                continue
            changed = "".join(
                f"; {kind} in {found.version}: {', '.join(names)} (not compared)"
                for kind, names in (("new outputs", found.new_outputs), ("outputs gone", found.gone_outputs))
                if names
            )
            worst = found.worst
            if worst is None:
                self.line(
                    escape_controls(
                        f"drift {found.model} {found.previous} -> {found.version}: no output "
                        f"compared ({'; '.join(found.skipped[:2]) or 'no case'}){changed}"
                    )
                )
                continue
            beyond = max(o.cases_beyond_tolerance for o in found.outputs)
            size = f", max abs diff {worst.max_abs_diff:.3g}" if worst.max_abs_diff is not None else ""
            self.line(
                escape_controls(
                    f"drift {found.model} {found.previous} -> {found.version}: up to "
                    f"{show_fraction(found.max_rel_diff)} ({worst.name}{size}) over {found.cases} case(s), "
                    + (f"BEYOND TOLERANCE in {beyond}" if beyond else "within tolerance")
                    + changed
                    + (f"; {len(found.skipped)} not compared (the report says why)" if found.skipped else "")
                )
            )

    def latency(self, found: Any) -> None:
        """The latency gate: per model with a new version, both versions' figures, the ratio and its
        interval, the verdict; cold starts; what was not measured and why."""
        if found is None:
            return
        if found.note:
            self.line(escape_controls(f"latency: {found.note}"))
        bound = f"max_latency_increase {found.bound:g}" if found.bound is not None else "no bound: reported only"
        for model in found.models:
            if model.failed:  # never a quiet line: with a bound the refusal follows, without one this warns
                assert model.under_load is not None
                refused = "REFUSED" if found.bound is not None else "not refused: no max_latency_increase"
                self.warning(
                    escape_controls(
                        f"latency {model.model} {model.previous} -> {model.version}: FAILED: {model.under_load.shown()}"
                        f" ({refused})"
                    )
                )
                for line in model.under_load.server_lines:
                    self.line(escape_controls(f"latency {model.model}: server: {line}"))
                continue
            if not model.measured:
                self.not_gated(model, found)
                continue
            for c in model.comparisons:
                self.line(
                    escape_controls(
                        f"latency {model.model} {model.previous} -> {model.version} (concurrency {c.concurrency}, "
                        f"{c.pairs} rounds each{', decided early' if c.early is not None else ''}): p50 {c.before.p50_us / 1000:.2f} -> {c.after.p50_us / 1000:.2f} ms, "
                        f"p99 {c.before.p99_us / 1000:.2f} -> {c.after.p99_us / 1000:.2f} ms, throughput "
                        f"{c.before.throughput:.0f} -> {c.after.throughput:.0f} infer/s; p50 ratio {c.p50.shown()}: "
                        f"{c.verdict.upper() if c.verdict != 'measured' else 'measured'} ({bound})"
                    )
                )
            if model.verdict == "inconclusive":
                self.warning(
                    f"latency {model.model}: inconclusive: the p50 ratio's interval straddles "
                    f"1 + {found.bound:g}; run more rounds (--latency-rounds, now {found.rounds}) or on a "
                    "quieter runner to decide"
                )
            if len(model.cold_start) == 2:
                before, after = model.cold_start
                self.line(
                    f"latency {model.model} cold start: load {_seconds(before.load_s)} -> "
                    f"{_seconds(after.load_s)}, first request {_ms(before.first_request_ms)} -> "
                    f"{_ms(after.first_request_ms)}"
                )
            for warning in model.warnings:
                self.warning(escape_controls(warning))

    def not_gated(self, model: Any, found: Any) -> None:
        """A model the gate left out: with a bound, a warning saying it is not gated and why (and that
        it refuses, with latency_unmeasured: refuse); without one, a line."""
        why = model.note or "not measured"
        if model.verdict != "not gated":  # a new model: nothing to compare
            self.line(escape_controls(f"latency {model.model}: {why}"))
        elif found.bound is None:
            self.line(escape_controls(f"latency {model.model}: not measured, because {why}"))
        else:
            refuses = " (latency_unmeasured: refuse: REFUSED)" if found.unmeasured == "refuse" else ""
            self.warning(escape_controls(f"latency {model.model}: not gated, because {why}{refuses}"))

    def recorded(self, result: Any) -> None:
        for path in result.written:
            self.line(
                f"{path}: answers recorded from {result.image} (outputs, or the error text a case expects); "
                "review them before you commit"
            )
        if not result.written:
            self.line("every case already has outputs (use --overwrite to record them again)")


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} s"


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} ms"


def show_fraction(value: float) -> str:
    """A relative difference for people: 1.00%, 0.0120%, infinite."""
    if not math.isfinite(value):
        return "infinite"
    percent = value * 100
    return f"{percent:.2f}%" if percent >= 0.01 or percent == 0 else f"{percent:.2g}%"
