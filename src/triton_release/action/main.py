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
from triton_release.errors import TritonReleaseError, UsageError
from triton_release.settings import resolve

DEFAULT_REPORT = "triton-release-report.json"
INPUT = "the action's input model-repository"


def main(env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    cache.configure(env)
    console = Console(ci=True)
    if env.get("INPUT_PASSWORD", "").strip():  # before anything else can print
        console.mask(env["INPUT_PASSWORD"].strip())
    workspace = Path(env.get("GITHUB_WORKSPACE") or ".")
    try:
        inputs: ActionInputs | TritonReleaseError = ActionInputs.from_env(env)
    except UsageError as exc:  # reported inside the session, so the report and outputs say it too
        inputs = exc
    mode = inputs.mode if isinstance(inputs, ActionInputs) else "release"
    report_path = inputs.report if isinstance(inputs, ActionInputs) else DEFAULT_REPORT
    session = sessions.Session("rollback" if mode == "rollback" else "release", console, timed=True)

    def body(session: sessions.Session) -> None:
        if not isinstance(inputs, ActionInputs):
            raise inputs
        settings = resolve({}, action_inputs=inputs.settings, cwd=workspace if workspace.is_dir() else None)
        console.settings(settings)
        run(inputs, settings, Event.from_env(env), env, session)

    return sessions.run(session, body, report_path=str(workspace / report_path),
                        after=lambda report: finish(report, report_path, env, console))


def run(inputs: ActionInputs, settings, event: Event, env: Mapping[str, str], session: sessions.Session) -> None:
    pushes = inputs.pushes(event)
    repository = release.open_repository(settings, env, required=pushes or inputs.mode == "rollback",
                                         how="the action's input repository", username=inputs.username,
                                         password=inputs.password)
    if inputs.mode == "rollback":
        if not inputs.rollback_to:
            raise UsageError("mode rollback needs the input rollback-to: the release X.Y.Z to point the channel at.")
        release.run_rollback(release.RollbackRequest(
            repository, inputs.rollback_to, settings.channel, inputs.verify,
            release.model_repository(settings, INPUT) if inputs.verify else None, settings.load_timeout, settings.server_memory,
            settings.server_pids, settings.max_loaded, settings.gpus, settings.gpu_models), session)
        return
    release.run_release(release.ReleaseRequest(
        model_repository=release.model_repository(settings, INPUT), repository=repository, base=inputs.base_ref or event.base,
        head="HEAD", base_image=settings.base_image, python=settings.python, stub=settings.stub,
        load_timeout=settings.load_timeout, channel=settings.channel, keep=settings.keep, push=pushes,
        commit=inputs.commit, source=release.provenance_source(env),
        requirements_options=settings.requirements_options, server_memory=settings.server_memory,
        server_pids=settings.server_pids, max_loaded=settings.max_loaded, max_layers=settings.max_layers,
        gpus=settings.gpus, gpu_models=settings.gpu_models), session)


def finish(report: sessions.Report, report_path: str, env: Mapping[str, str], console: Console) -> None:
    """Outputs and the step summary; neither may fail the run."""
    if env.get("GITHUB_OUTPUT"):
        outputs = ActionOutputs.from_report(report, report_path)
        for problem in outputs.problems():
            console.warning(f"the action's output {problem}; it is left empty")
        try:
            outputs.valid().write(env["GITHUB_OUTPUT"])
        except OSError as exc:
            console.warning(f"the action's outputs could not be written ({exc.strerror})")
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
