"""The GitHub Action's entry point (`triton-release-action`): inputs and event -> one run of
`release`, `rollback`, or a stage of a release over many runners (`stage`, `test` of a
candidate, `promote`) in a session, then the outputs and the step summary.

No shell ever sees an input. The password is masked before anything is printed. Outputs and
the summary are written whatever happened, a bad input included.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from triton_release import cache, processes, release, requests
from triton_release import session as sessions
from triton_release.action.inputs import SETTING_DEFAULTS, ActionInputs, Event, key_files
from triton_release.action.outputs import finish
from triton_release.console import Console
from triton_release.errors import TritonReleaseError, UsageError
from triton_release.registry.credentials import unpaired_credentials
from triton_release.settings import Settings, resolve

DEFAULT_REPORT = "triton-release-report.json"


def main(env: Mapping[str, str] | None = None) -> int:
    """The environment is read here, once: the inputs and the event, the cache's folder; then the
    mode's request is built and run as the CLI builds and runs its command's."""
    env = dict(os.environ if env is None else env)
    console = Console(ci=True)
    for secret in ("INPUT_PASSWORD", "INPUT_SIGNING-KEY"):  # before anything else can print
        if env.get(secret, "").strip():
            console.mask(env[secret].strip())
    workspace = Path(env.get("GITHUB_WORKSPACE") or ".")
    cache.configure(env)
    try:
        inputs: ActionInputs | TritonReleaseError = ActionInputs.from_env(env)
    except UsageError as exc:  # reported inside the session, so the report and outputs say it too
        inputs = exc
    event = Event.from_env(env)
    mode = inputs.mode if isinstance(inputs, ActionInputs) else "release"
    report_path = inputs.report if isinstance(inputs, ActionInputs) else DEFAULT_REPORT
    command = mode if mode in ("rollback", "stage", "promote", "doctor") else "release"
    if isinstance(inputs, ActionInputs) and mode == "test" and inputs.candidate:
        command = "test"
    session = sessions.Session(command, console, timed=True)

    def body(session: sessions.Session) -> None:
        if not isinstance(inputs, ActionInputs):
            raise inputs
        with key_files(inputs, env) as keys:  # the PEM inputs as files, removed when the run ends
            for warning in unpaired_credentials(env, inputs.username, inputs.password):
                console.warning(warning)
            settings = resolve(
                {},
                action_inputs={**inputs.settings, **keys},
                cwd=workspace if workspace.is_dir() else None,
                defaults=SETTING_DEFAULTS,
            )
            console.settings(settings)
            MODES[inputs.mode](inputs, settings, event, env, session)

    return sessions.run(
        session,
        body,
        report_path=str(workspace / report_path),
        after=lambda report: finish(report, report_path, env, console),
    )


def release_mode(
    inputs: ActionInputs, settings: Settings, event: Event, env: Mapping[str, str], session: sessions.Session
) -> None:
    """mode release (and test of this checkout): since the last release, a pull request's since its base."""
    request = requests.release_request(
        settings,
        base=inputs.base_ref or event.base,
        head="HEAD",
        push=inputs.pushes(event),
        commit=inputs.commit,
        env=env,
        door=door(inputs),
    )
    release.run_release(request, session)


def test_mode(
    inputs: ActionInputs, settings: Settings, event: Event, env: Mapping[str, str], session: sessions.Session
) -> None:
    """mode test: with a candidate, one shard of it, its record written to the registry; else the
    checkout's release, tested and not pushed."""
    if not inputs.candidate:
        if inputs.shard or inputs.models:
            given = "shard" if inputs.shard else "models"
            raise UsageError(f"""
                mode test was given the input {given} but no candidate: {given} selects part of a staged
                candidate. Give candidate: the stage job's `candidate` output (needs.stage.outputs.candidate),
                or leave {given} out to test this checkout's release.""")
        release_mode(inputs, settings, event, env, session)
        return
    from triton_release.fanout.stage import run_candidate_test

    request = requests.candidate_test_request(
        settings,
        candidate=inputs.candidate,
        shard=inputs.shard or None,
        models=tuple(m for m in inputs.models.split(",") if m),
        env=env,
        door=door(inputs),
    )
    run_candidate_test(request, session)


def rollback_mode(
    inputs: ActionInputs, settings: Settings, _event: Event, env: Mapping[str, str], session: sessions.Session
) -> None:
    """mode rollback: the channel pointed back at release rollback-to."""
    if not inputs.rollback_to:
        raise UsageError("mode rollback needs the input rollback-to: the release X.Y.Z to point the channel at.")
    request = requests.rollback_request(
        settings, version=inputs.rollback_to, verify=inputs.verify, env=env, door=door(inputs)
    )
    release.run_rollback(request, session)


def stage_mode(
    inputs: ActionInputs, settings: Settings, event: Event, env: Mapping[str, str], session: sessions.Session
) -> None:
    """mode stage: build once, push the candidate, plan the shards (the `shards` output)."""
    from triton_release.fanout.stage import run_stage

    request = requests.stage_request(
        settings,
        base=inputs.base_ref or event.base,
        head="HEAD",
        shards=inputs.shards,
        max_models=inputs.max_models_per_shard,
        env=env,
        door=door(inputs),
    )
    run_stage(request, session)


def promote_mode(
    inputs: ActionInputs, settings: Settings, _event: Event, env: Mapping[str, str], session: sessions.Session
) -> None:
    """mode promote: the candidate becomes release X.Y.Z once every shard's record passed."""
    from triton_release.fanout.promote import run_promote

    if not inputs.candidate:
        raise UsageError("mode promote needs the input candidate: the stage job's `candidate` output.")
    if not inputs.version:
        raise UsageError("mode promote needs the input version: the stage job's `version` output.")
    request = requests.promote_request(
        settings, candidate=inputs.candidate, version=inputs.version, commit=inputs.commit, env=env, door=door(inputs)
    )
    run_promote(request, session)


def doctor_mode(
    inputs: ActionInputs, settings: Settings, _event: Event, env: Mapping[str, str], session: sessions.Session
) -> None:
    """mode doctor: whether a release can run on this runner (steps/doctor.py), as a first step."""
    from triton_release import steps

    root = Path(settings.model_repository)
    registry = requests.repository(settings, env, door(inputs), "repository", required=False)
    session.step(
        "doctor",
        session.console.diagnosis,
        steps.doctor,
        settings,
        env,
        registry,
        model_root=root if root.is_dir() else None,
    )


MODES: dict[str, Callable[[ActionInputs, Settings, Event, Mapping[str, str], sessions.Session], None]] = {
    "release": release_mode,
    "test": test_mode,
    "rollback": rollback_mode,
    "stage": stage_mode,
    "promote": promote_mode,
    "doctor": doctor_mode,
}


def door(inputs: ActionInputs) -> requests.Door:
    """The action's door: its inputs named in messages, and its registry credentials."""
    return requests.Door(action=True, username=inputs.username or None, password=inputs.password or None)


script = processes.script(main)  # the console script: main, then the process ends at once

if __name__ == "__main__":
    script()
