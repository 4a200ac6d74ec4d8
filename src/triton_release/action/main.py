"""The GitHub Action: inputs -> one CLI command, event-aware defaults, outputs and the summary.

Inputs arrive as INPUT_* environment variables and become an argument list for `cli.main`:
no shell ever sees them. The password is masked before anything is printed.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Callable

from triton_release.console import Console
from triton_release.errors import UsageError

TRUE = {"true", "1", "yes", "on"}
MODES = ("release", "test", "rollback")


def input_value(name: str) -> str:
    return os.environ.get(f"INPUT_{name.upper()}", "").strip()


def event() -> tuple[str, dict]:
    name = os.environ.get("GITHUB_EVENT_NAME", "")
    try:
        payload = json.loads(Path(os.environ["GITHUB_EVENT_PATH"]).read_text())
    except (KeyError, OSError, ValueError):
        payload = {}
    return name, payload if isinstance(payload, dict) else {}


def event_base(name: str, payload: dict) -> str | None:
    """A pull request's base sha; None otherwise: the last release (its vX.Y.Z git tag, else its
    image's revision), so a change whose release failed is released by the next push, which a
    push's `before` would miss. No release yet: a first release of every model."""
    if name in ("pull_request", "pull_request_target"):
        return (payload.get("pull_request") or {}).get("base", {}).get("sha")
    return None


def default_push(name: str) -> bool:
    return name not in ("pull_request", "pull_request_target")


def command(report: str) -> list[str]:
    """The CLI arguments the inputs stand for."""
    mode = input_value("mode") or "release"
    if mode not in MODES:
        raise UsageError(f"the action's input mode is {mode!r}; give one of {', '.join(MODES)}.")
    common = ["--report", report]
    if input_value("model-repository"):
        common += ["--model-repository", input_value("model-repository")]
    if mode == "rollback":
        argv = ["rollback", "--to-version", input_value("rollback-to"), *common]
        if input_value("image"):
            argv += ["--repo", input_value("image")]
        if input_value("channel"):
            argv += ["--channel", input_value("channel")]
        if input_value("verify").lower() in TRUE:
            argv.append("--verify")
        return argv
    name, payload = event()
    argv = ["release", *common]
    base = input_value("base-ref") or event_base(name, payload)
    if base:
        argv += ["--base", base]
    if input_value("image"):
        argv += ["--to", input_value("image")]
    for flag, key in (("--base-image", "base-image"), ("--python", "python"), ("--stub", "stub"),
                      ("--channel", "channel"), ("--keep", "keep"), ("--load-timeout", "load-timeout")):
        if input_value(key):
            argv += [flag, input_value(key)]
    wanted = input_value("push").lower()
    push = (wanted in TRUE) if wanted else default_push(name)
    if mode == "test" or not push:
        argv.append("--no-push")
    if input_value("commit").lower() in TRUE:
        argv.append("--commit")
    return argv


def write_outputs(report: dict, report_path: str) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    rollback = report.get("rollback") or {}
    values = {
        "version": report.get("version") or rollback.get("to_version") or "",
        "image": report.get("image") or "",
        "digest": report.get("digest") or "",
        "changed-models": json.dumps(report.get("changed_models") or []),
        "report": report_path,
    }
    with open(path, "a", encoding="utf-8") as out:
        for key, value in values.items():
            delimiter = f"triton_release_{uuid.uuid4().hex}"
            out.write(f"{key}<<{delimiter}\n{value}\n{delimiter}\n")


def summary(report: dict) -> str:
    """The Markdown a reviewer reads in the run's summary."""
    steps = report.get("steps", {})
    lines = ["## triton-release", ""]
    if "rollback" in report:
        done = report["rollback"]
        lines.append(f"Rolled `{done.get('channel')}` of `{done.get('repository')}` back to **{done.get('to_version')}** "
                     f"(`{done.get('digest')}`; before: `{done.get('previous_digest')}`).")
    changed = steps.get("changed", {})
    if changed:
        models = report.get("changed_models") or []
        lines.append(f"**Changed models:** {', '.join(f'`{m}`' for m in models) or 'none'}  ")
        lines.append(f"**Version:** {changed.get('previous_version') or 'none'} -> "
                     f"**{changed.get('version') or 'no release'}** ({(changed.get('release') or {}).get('kind') or 'nothing'})")
        bumps = steps.get("bump", {}).get("bumps") or []
        for bump in bumps:
            lines.append(f"- `{bump['model']}`: version {bump['from']} -> {bump['to']}")
    stub = steps.get("build", {}).get("stub")
    if stub:
        kept = "kept the stock stub" if stub["kept"] else f"stub from {stub['origin']} ({stub['provider']})"
        lines += ["", f"**Stub:** {kept}; Python {stub['target_python']}, Triton {stub['triton_version']}"]
    cases = steps.get("test", {}).get("cases") or []
    if cases:
        lines += ["", "| golden case | result | latency (ms) | max abs diff |", "| --- | --- | ---: | ---: |"]
        for case in cases:
            diffs = [o["max_abs_diff"] for o in case.get("outputs", []) if o.get("max_abs_diff") is not None]
            worst = f"{max(diffs):.3g}" if diffs else ""
            result = "pass" if case["passed"] else f"**fail**: {case.get('message', '')}"
            lines.append(f"| `{case['case']}` | {result} | {case['latency_ms']:.1f} | {worst} |")
    pushed = steps.get("push", {})
    if pushed.get("tags"):
        lines += ["", f"**Pushed** `{pushed['image']}` ({pushed['digest']}): tags "
                  + ", ".join(f"`{t}`" for t in pushed["tags"])]
    error = report.get("error")
    if error:
        lines += ["", f"**Failed** (exit {error['exit_code']}): {error['message']}"]
    return "\n".join(lines) + "\n"


def run(main: Callable[[list[str]], int]) -> int:
    """Run as the action: mask the password, run the command, write outputs and the summary."""
    password = input_value("password")
    if password:
        print(f"::add-mask::{password}", flush=True)
    workspace = Path(os.environ.get("GITHUB_WORKSPACE") or ".")
    report_path = input_value("report") or "triton-release-report.json"
    report_file = workspace / report_path
    try:
        argv = command(str(report_file))
    except UsageError as exc:
        Console().failure(exc.message)
        return exc.exit_code
    code = main(argv)
    try:
        report = json.loads(report_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report = {}
    write_outputs(report, report_path)
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            text = summary(report)
        except (KeyError, TypeError, ValueError) as exc:  # the summary must never fail a release
            text = f"## triton-release\n\nThe summary could not be written ({exc!r}); see the report {report_path}.\n"
        with open(summary_path, "a", encoding="utf-8") as out:
            out.write(text)
    return code
