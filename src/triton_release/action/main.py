"""The GitHub Action's entry point (`triton-release-action`): inputs and event -> one run of
`release` or `rollback` in a session, then the outputs and the step summary.

No shell ever sees an input. The password is masked before anything is printed. Outputs and
the summary are written whatever happened, a bad input included.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

from triton_release import cache, release, session as sessions
from triton_release.action.inputs import ActionInputs, Event
from triton_release.action.outputs import ActionOutputs, summary
from triton_release.console import Console
from triton_release.errors import UsageError
from triton_release.settings import resolve


def main(env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    cache.configure(env)
    console = Console(ci=True)
    password = env.get("INPUT_PASSWORD", "").strip()
    if password:
        console.mask(password)
    workspace = Path(env.get("GITHUB_WORKSPACE") or ".")
    report_path = env.get("INPUT_REPORT", "").strip() or "triton-release-report.json"
    mode = env.get("INPUT_MODE", "").strip() or "release"
    session = sessions.Session("rollback" if mode == "rollback" else "release", console, timed=True)

    def body(session: sessions.Session) -> None:
        inputs = ActionInputs.from_env(env)
        for warning in inputs.warnings:
            console.warning(warning)
        settings = resolve({}, action_inputs=inputs.settings, cwd=workspace if workspace.is_dir() else None)
        console.settings(settings)
        run(inputs, settings, Event.from_env(env), env, session)

    code = sessions.run(session, body, report_path=str(workspace / report_path))
    finish(session.report, report_path, env, console)
    return code


def run(inputs: ActionInputs, settings, event: Event, env: Mapping[str, str], session: sessions.Session) -> None:
    from triton_release.registry.client import open_repository

    root = Path(settings.model_repository)
    if not root.is_dir():
        raise UsageError(f"{root}: no such model repository; set the action's model-repository input.")
    pushes = inputs.pushes(event)
    registry = None
    if settings.repository:
        registry = open_repository(settings.repository, env, inputs.username, inputs.password)
    elif pushes or inputs.mode == "rollback":
        raise UsageError("the action's input repository is required to push or roll back, e.g. ghcr.io/org/models.")
    if inputs.mode == "rollback":
        if not inputs.rollback_to:
            raise UsageError("mode rollback needs the input rollback-to: the release X.Y.Z to point the channel at.")
        release.run_rollback(release.RollbackRequest(registry, inputs.rollback_to, settings.channel, inputs.verify,
                                                     root, settings.load_timeout), session)
        return
    request = release.ReleaseRequest(
        model_repository=root, registry=registry, base=inputs.base_ref or event.base, head="HEAD",
        base_image=settings.base_image, python=settings.python, stub=settings.stub,
        load_timeout=settings.load_timeout, channel=settings.channel, keep=settings.keep, push=pushes,
        commit=inputs.commit, source=release.provenance_source(env))
    release.run_release(request, session)


def finish(report: sessions.Report, report_path: str, env: Mapping[str, str], console: Console) -> None:
    """Outputs and the step summary; neither may fail the run."""
    if env.get("GITHUB_OUTPUT"):
        try:
            ActionOutputs.from_report(report, report_path).write(env["GITHUB_OUTPUT"])
        except (UsageError, OSError) as exc:
            console.warning(f"the action's outputs could not be written ({exc})")
    if env.get("GITHUB_STEP_SUMMARY"):
        try:
            text = summary(report)
        except Exception as exc:  # the summary must never fail a release
            text = f"## triton-release\n\nThe summary could not be written ({exc!r}); see the report {report_path}.\n"
        try:
            with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            console.warning(f"the step summary could not be written ({exc.strerror})")


if __name__ == "__main__":
    sys.exit(main())
