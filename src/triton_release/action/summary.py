"""The step summary: the Markdown a reviewer reads in the run's summary, rendered from the run's
typed results (changes, bumps, golden cases, drift, latency, candidate, publishing, evidence)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from triton_release.console import escape_controls
from triton_release.session import Report

if TYPE_CHECKING:
    from triton_release.evidence.attach import Evidence
    from triton_release.evidence.verify import EvidenceCheck
    from triton_release.models.drift import ModelDrift
    from triton_release.models.latency import LatencyRun


def _md(text: object) -> str:
    """User text in a Markdown table cell: no pipes, no line breaks, no markup."""
    return (
        re.sub(r"([\\`*_{}\[\]<>|])", r"\\\1", escape_controls(str(text), lines=True))
        .replace("\r", " ")
        .replace("\n", " ")
    )


def _drift_table(drifts: Sequence[ModelDrift]) -> list[str]:
    """Each new model version against the one before, per output; beyond tolerance in bold."""
    if not drifts:
        return []
    from triton_release.console.golden import show_fraction

    lines = [
        "",
        "**Drift**: each new model version against the one before, on the same golden inputs",
        "",
        "| model | versions | output | max abs diff | max rel diff | beyond tolerance |",
        "| --- | --- | --- | ---: | ---: | --- |",
    ]
    notes = []
    for found in drifts:
        if not found.compared:
            notes.append(f"- `{_md(found.model)}`: not compared: {_md(found.note)}")
            continue
        versions = f"{found.previous} -> {found.version}"
        for output in found.outputs:
            size = f"{output.max_abs_diff:.3g}" if output.max_abs_diff is not None else ""
            rel = show_fraction(output.max_rel_diff)
            beyond = "no"
            if output.beyond_tolerance:
                rel = f"**{rel}**"
                beyond = f"**yes**: {output.cases_beyond_tolerance} of {output.cases} cases"
                if output.worst:
                    beyond += f" ({_md(output.worst)})"
            lines.append(f"| `{_md(found.model)}` | {versions} | `{_md(output.name)}` | {size} | {rel} | {beyond} |")
        if not found.outputs:
            notes.append(f"- `{_md(found.model)}` {versions}: no output compared")
        for skipped in found.skipped[:5]:
            notes.append(f"- `{_md(found.model)}`: not compared: {_md(skipped)}")
        if len(found.skipped) > 5:
            notes.append(f"- `{_md(found.model)}`: {len(found.skipped) - 5} more parts not compared (see the report)")
    if len(lines) == 5:  # no model compared: the notes alone
        lines = lines[:2]
    return lines + ([""] + notes if notes else [])


def _latency_table(found: LatencyRun | None) -> list[str]:
    """One table for the release: each new model version's latency against the one before, per
    concurrency; a ratio beyond the bound and a refusal in bold."""
    if found is None or not (found.models or found.note):
        return []
    if not found.asked:  # the default: nothing measured, one line saying so and how to ask
        return ["", f"**Latency**: {_md(found.note)}"]
    bound = f"max-latency-increase {found.bound:g}" if found.bound is not None else "no bound: reported only"
    lines = [
        "",
        f"**Latency** (perf_analyzer, at most {found.rounds} rounds per version, {bound}): each new model "
        "version against the one before, on the same golden inputs",
        "",
    ]
    rows = [
        "| model | versions | concurrency | p50 (ms) | p99 (ms) | throughput (infer/s) | p50 ratio [95% interval] "
        "| verdict |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    notes = [f"- {_md(found.note)}"] if found.note else []
    for model in found.models:
        if model.failed:
            assert model.under_load is not None
            refused = "refused" if found.bound is not None else "not refused: no max-latency-increase"
            notes.append(
                f"- **`{_md(model.model)}` {model.previous} -> {model.version}: failed**: "
                f"{_md(model.under_load.shown())} ({refused})"
            )
            notes += [f"  - server: {_md(line)}" for line in model.under_load.server_lines]
            continue
        if not model.measured:
            why = _md(model.note or "not measured")
            if model.verdict != "not gated":
                notes.append(f"- `{_md(model.model)}`: {why}")
            elif found.bound is None:
                notes.append(f"- `{_md(model.model)}`: not measured, because {why}")
            else:
                refuses = " (latency-unmeasured refuse: **refused**)" if found.unmeasured == "refuse" else ""
                notes.append(f"- `{_md(model.model)}`: **not gated**, because {why}{refuses}")
            continue
        for c in model.comparisons:
            ratio = c.p50.shown()
            beyond = found.bound is not None and c.p50.estimate > 1 + found.bound
            verdict = f"**{c.verdict}**" if c.verdict in ("refused", "inconclusive") else c.verdict
            rows.append(
                f"| `{_md(model.model)}` | {model.previous} -> {model.version} | {c.concurrency} | "
                f"{c.before.p50_us / 1000:.2f} -> {c.after.p50_us / 1000:.2f} | "
                f"{c.before.p99_us / 1000:.2f} -> {c.after.p99_us / 1000:.2f} | "
                f"{c.before.throughput:.0f} -> {c.after.throughput:.0f} | "
                f"{f'**{ratio}**' if beyond else ratio} | {verdict} |"
            )
        if len(model.cold_start) == 2 and all(c.load_s is not None for c in model.cold_start):
            before, after = model.cold_start
            first = ""
            if before.first_request_ms is not None and after.first_request_ms is not None:
                first = f", first request {before.first_request_ms:.1f} -> {after.first_request_ms:.1f} ms"
            notes.append(f"- `{_md(model.model)}` cold start: load {before.load_s:.2f} -> {after.load_s:.2f} s{first}")
        notes += [f"- **warning**: {_md(w)}" for w in model.warnings]
    return lines + (rows if len(rows) > 2 else []) + ([""] + notes if notes else [])


def _evidence_lines(evidence: Evidence | None, checked: EvidenceCheck | None) -> list[str]:
    """The release's evidence by its digests, and how to check it; or the check a rollback made."""
    from triton_release.contract import GOLDEN_TYPE, KINDS

    lines: list[str] = []
    if evidence is not None:
        where = f"{evidence.repository}@{evidence.digest}"
        signed = (
            f"signed with {_md(evidence.signed_by)}"
            if evidence.signing != "none"
            else "**unsigned**: give the action a signing-key (a PKCS#8 PEM ECDSA P-256 key from a secret) to sign it"
        )
        rerun = (
            " (its golden cases run again by this run: the run that pushed it stopped before)"
            if evidence.how == "rerun"
            else ""
        )
        lines += [
            "",
            f"**Evidence** of `{_md(where)}`{rerun}: `{_md(evidence.repository)}:{_md(evidence.tag)}` "
            f"(manifest {evidence.manifest}, {evidence.bytes} bytes), {signed}",
            "",
            "| statement | predicate type | layer digest |",
            "| --- | --- | --- |",
        ]
        lines += [
            f"| {KINDS.get(layer.predicate_type, 'other')} | `{_md(layer.predicate_type)}` | {layer.digest} |"
            for layer in evidence.layers
        ]
        if evidence.signing == "key":
            lines += [
                "",
                f"Verify it: `triton-release verify {_md(where)} --key cosign.pub`, or `cosign "
                f"verify-attestation --key cosign.pub --insecure-ignore-tlog=true --type {GOLDEN_TYPE} "
                f"{_md(where)}`",
            ]
        elif evidence.signing == "keyless":
            lines += [
                "",
                f"Verify it: `cosign verify-attestation --type {GOLDEN_TYPE} --certificate-identity-regexp "
                f"'^https://github.com/' --certificate-oidc-issuer https://token.actions.githubusercontent.com "
                f"{_md(where)}`",
            ]
    if checked is not None:
        state = "verified" if checked.ok else "**does not verify**: " + _md("; ".join(checked.problems))
        lines += [
            "",
            f"**Evidence** of `{_md(checked.repository)}@{checked.digest}` checked with key {checked.key}: {state}",
        ]
    return lines


def summary(report: Report) -> str:
    """The Markdown a reviewer reads in the run's summary, from the run's typed results."""
    lines = ["## triton-release", ""]
    rolled = report.result("rollback")
    if rolled is not None and hasattr(rolled, "channel"):
        lines.append(
            f"Rolled `{rolled.channel}` of `{rolled.repository}` back to **{rolled.version}** "
            f"(`{rolled.digest}`; before: `{rolled.previous_digest}`)."
        )
    changed = report.result("changed")
    if changed is not None:
        models = sorted(changed.found.models)
        plan = changed.plan
        lines.append(f"**Changed models:** {', '.join(f'`{m}`' for m in models) or 'none'}  ")
        for name in changed.found.ensembles:
            lines.append(f"- `{name}`: ensemble using a changed model; tested, not bumped")
        if plan is not None:
            lines.append(
                f"**Version:** {plan.previous or 'none'} -> **{plan.version or 'no release'}** "
                f"({changed.kind.kind or 'nothing'})"
            )
    bumped = report.result("bump")
    undone = " (undone: the release failed)" if report.result("undo-bump") is not None else ""
    for bump in bumped.bumps if bumped is not None else ():
        lines.append(f"- `{bump.model}`: version {bump.from_version} -> {bump.to_version}{undone}")
    carried = getattr(bumped, "carried", ())
    for item in carried:
        lines.append(
            f"- `{_md(item.model)}`: version {item.version} carried from `{_md(item.release)}`, the "
            "registry's record (its bump was never committed to git)"
        )
    if bumped is not None and (bumped.bumps or carried) and report.result("commit") is None and not undone:
        lines.append(
            "- The bump is not committed (commit: false): the registry keeps the record of released "
            "versions, and the next release carries them."
        )
    built = report.result("build")
    if built is not None:
        stub = built.stub
        kept = "kept the stock stub" if stub.kept else f"stub from {stub.origin} ({stub.provider})"
        lines += ["", f"**Stub:** {kept}; Python {stub.target_python}, Triton {stub.triton_version}"]
    run = report.result("test") or report.result("verify")
    on_cpu = set(getattr(run, "on_cpu", ()))
    if run is not None and run.cases:
        lines += ["", "| golden case | result | latency (ms) | max abs diff |", "| --- | --- | ---: | ---: |"]
        for case in run.cases:
            diffs = [o.max_abs_diff for o in case.outputs if o.max_abs_diff is not None]
            worst = f"{max(diffs):.3g}" if diffs else ""
            result = "pass" if case.passed else f"**fail**: {_md(case.message)}"
            if case.case.split("/", 1)[0] in on_cpu:
                result += " (tested on CPU)"
            lines.append(f"| `{_md(case.case)}` | {result} | {case.latency_ms:.1f} | {worst} |")
    if on_cpu:
        lines += [
            "",
            "**Tested on CPU** (KIND_GPU instance groups loaded as KIND_CPU): "
            + ", ".join(f"`{_md(m)}`" for m in sorted(on_cpu)),
        ]
    needs_gpu = list(getattr(run, "needs_gpu", ()))
    if needs_gpu:
        lines += ["", *(f"- `{_md(name)}`: **not tested**: needs a GPU: {_md(why)}" for name, why in needs_gpu)]
    lines += _drift_table(getattr(run, "drift", ()))
    lines += _latency_table(getattr(run, "latency", None))
    staged = report.result("candidate") or report.result("reuse")
    if staged is not None:
        candidate = staged.candidate
        how = "reused, staged before from this commit" if staged.reused else f"pushed as `{_md(staged.tag)}`"
        lines += [
            "",
            f"**Candidate:** `{_md(candidate.ref)}` ({how}); release **{candidate.version or 'none'}** "
            "once every shard passed",
            "",
            "| shard | models | golden cases | runner |",
            "| --- | --- | ---: | --- |",
        ]
        for shard in candidate.shards:
            lines.append(
                f"| {_md(shard.name)} | {_md(', '.join(shard.models))} | {shard.cases} | "
                f"{'GPU' if shard.gpu else 'CPU'} |"
            )
    recorded = report.result("golden-record")
    if recorded is not None:
        lines += [
            "",
            f"**Record:** {_md(recorded.shard)} {'passed' if recorded.passed else '**failed**'}: "
            f"`{_md(recorded.repository)}:{_md(recorded.tag)}`",
        ]
    promoted = report.result("promote")
    if promoted is not None:
        lines += [
            "",
            f"**Promoted** `{_md(promoted.repository)}:{_md(promoted.version)}` ({promoted.digest}): tags "
            + ", ".join(f"`{_md(t)}`" for t in promoted.tags),
        ]
    pushed, tagged = report.result("push"), report.result("tags")
    if pushed is not None:
        tags = [pushed.version, *(tagged.tags if tagged is not None else ())]
        lines += [
            "",
            f"**Pushed** `{pushed.repository}:{pushed.version}` ({pushed.digest}): tags "
            + ", ".join(f"`{t}`" for t in tags),
        ]
    lines += _evidence_lines(report.result("evidence"), report.result("check-evidence"))
    back = report.result("push-back")
    if back is not None:
        what = "the release commit and " if back.with_commit else ""
        where = f"`{_md(back.remote)}` {f'`{_md(back.branch)}`' if back.branch else ''}".rstrip()
        lines += [
            "",
            f"**Pushed back** {what}`{_md(back.tag)}` to {where}"
            if back.pushed
            else f"**Not pushed back** ({back.outcome}): {what}`{_md(back.tag)}`: {_md(back.reason)}. The release "
            "is published; the registry keeps the record of released versions.",
        ]
    error = report.error_json()
    if error:
        lines += ["", f"**Failed** (exit {error['exit_code']}): {_md(error['message'])}"]
    return "\n".join(lines) + "\n"
