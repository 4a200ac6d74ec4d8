"""The action's outputs, typed and checked before they are written, and the step summary."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from triton_release.errors import UsageError
from triton_release.session import Report

_VERSION = re.compile(r"^(\d+\.\d+\.\d+)?$")
_DIGEST = re.compile(r"^(sha256:[0-9a-f]{64})?$")


@dataclass(frozen=True)
class ActionOutputs:
    version: str
    image: str
    digest: str
    changed_models: tuple[str, ...]
    report: str

    @classmethod
    def from_report(cls, report: Report, report_path: str) -> "ActionOutputs":
        facts = report.facts
        outputs = cls(facts.get("version") or "", facts.get("image") or "", facts.get("digest") or "",
                      tuple(facts.get("changed_models") or ()), report_path)
        outputs.check()
        return outputs

    def check(self) -> None:
        if not _VERSION.match(self.version):
            raise UsageError(f"output version {self.version!r} is not X.Y.Z")
        if not _DIGEST.match(self.digest):
            raise UsageError(f"output digest {self.digest!r} is not a sha256 digest")
        if any(not isinstance(m, str) or "\n" in m for m in self.changed_models):
            raise UsageError("output changed-models must be a list of model names")

    def values(self) -> dict[str, str]:
        return {"version": self.version, "image": self.image, "digest": self.digest,
                "changed-models": json.dumps(list(self.changed_models)), "report": self.report}

    def write(self, path: str) -> None:
        """Append to $GITHUB_OUTPUT, each value between delimiters no value can contain."""
        with open(path, "a", encoding="utf-8") as out:
            for key, value in self.values().items():
                delimiter = f"triton_release_{uuid.uuid4().hex}"
                out.write(f"{key}<<{delimiter}\n{value}\n{delimiter}\n")


def _md(text: object) -> str:
    """User text in a Markdown table cell: no pipes, no line breaks, no markup."""
    return re.sub(r"([\\`*_{}\[\]<>|])", r"\\\1", str(text)).replace("\r", " ").replace("\n", " ")


def summary(report: Report) -> str:
    """The Markdown a reviewer reads in the run's summary, from the run's typed results."""
    lines = ["## triton-release", ""]
    rolled = report.result("rollback")
    if rolled is not None and hasattr(rolled, "channel"):
        lines.append(f"Rolled `{rolled.channel}` of `{rolled.repository}` back to **{rolled.version}** "
                     f"(`{rolled.digest}`; before: `{rolled.previous_digest}`).")
    changed = report.result("changed")
    if changed is not None:
        models = sorted(changed.found.models)
        plan = changed.plan
        lines.append(f"**Changed models:** {', '.join(f'`{m}`' for m in models) or 'none'}  ")
        for name in changed.found.ensembles:
            lines.append(f"- `{name}`: ensemble using a changed model; tested, not bumped")
        if plan is not None:
            lines.append(f"**Version:** {plan.previous or 'none'} -> **{plan.version or 'no release'}** "
                         f"({changed.kind.kind or 'nothing'})")
    bumped = report.result("bump")
    for bump in (bumped.bumps if bumped is not None else ()):
        lines.append(f"- `{bump.model}`: version {bump.from_version} -> {bump.to_version}")
    built = report.result("build")
    if built is not None:
        stub = built.stub
        kept = "kept the stock stub" if stub.kept else f"stub from {stub.origin} ({stub.provider})"
        lines += ["", f"**Stub:** {kept}; Python {stub.target_python}, Triton {stub.triton_version}"]
    run = report.result("test") or report.result("verify")
    if run is not None and run.cases:
        lines += ["", "| golden case | result | latency (ms) | max abs diff |", "| --- | --- | ---: | ---: |"]
        for case in run.cases:
            diffs = [o.max_abs_diff for o in case.outputs if o.max_abs_diff is not None]
            worst = f"{max(diffs):.3g}" if diffs else ""
            result = "pass" if case.passed else f"**fail**: {_md(case.message)}"
            lines.append(f"| `{_md(case.case)}` | {result} | {case.latency_ms:.1f} | {worst} |")
    pushed = report.result("push")
    if pushed is not None:
        lines += ["", f"**Pushed** `{pushed.repository}:{pushed.version}` ({pushed.digest}): tags "
                  + ", ".join(f"`{t}`" for t in pushed.tags)]
    error = report.error_json()
    if error:
        lines += ["", f"**Failed** (exit {error['exit_code']}): {_md(error['message'])}"]
    return "\n".join(lines) + "\n"
