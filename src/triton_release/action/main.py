"""The GitHub Action's entry point (`triton-release-action`): inputs and event -> one run of
`release`, `rollback`, or a stage of a release over many runners (`stage`, `test` of a
candidate, `promote`) in a session, then the outputs and the step summary.

No shell ever sees an input. The password is masked before anything is printed. Outputs and
the summary are written whatever happened, a bad input included.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypedDict

from triton_release import cache, release
from triton_release import session as sessions
from triton_release.action.inputs import SETTING_DEFAULTS, ActionInputs, Event
from triton_release.action.outputs import ActionOutputs
from triton_release.action.summary import summary
from triton_release.console import Console
from triton_release.errors import TritonReleaseError, UsageError
from triton_release.history.push_back import PushTarget
from triton_release.models.gates import GateOptions
from triton_release.registry.credentials import unpaired_credentials
from triton_release.settings import ImageOptions, PublishOptions, Settings, resolve

DEFAULT_REPORT = "triton-release-report.json"
INPUT = "the action's input model-repository"


def main(env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    cache.configure(env)
    console = Console(ci=True)
    for secret in ("INPUT_PASSWORD", "INPUT_SIGNING-KEY"):  # before anything else can print
        if env.get(secret, "").strip():
            console.mask(env[secret].strip())
    workspace = Path(env.get("GITHUB_WORKSPACE") or ".")
    try:
        inputs: ActionInputs | TritonReleaseError = ActionInputs.from_env(env)
    except UsageError as exc:  # reported inside the session, so the report and outputs say it too
        inputs = exc
    mode = inputs.mode if isinstance(inputs, ActionInputs) else "release"
    report_path = inputs.report if isinstance(inputs, ActionInputs) else DEFAULT_REPORT
    command = mode if mode in ("rollback", "stage", "promote") else "release"
    if isinstance(inputs, ActionInputs) and mode == "test" and inputs.candidate:
        command = "test"
    session = sessions.Session(command, console, timed=True)

    def body(session: sessions.Session) -> None:
        if not isinstance(inputs, ActionInputs):
            raise inputs
        for warning in unpaired_credentials(env, inputs.username, inputs.password):
            console.warning(warning)
        with key_files(inputs, env) as keys:  # the PEM inputs as files, removed when the run ends
            settings = resolve(
                {},
                action_inputs={**inputs.settings, **keys},
                cwd=workspace if workspace.is_dir() else None,
                defaults=SETTING_DEFAULTS,
            )
            console.settings(settings)
            run(inputs, settings, Event.from_env(env), env, session)

    return sessions.run(
        session,
        body,
        report_path=str(workspace / report_path),
        after=lambda report: finish(report, report_path, env, console),
    )


def run(inputs: ActionInputs, settings, event: Event, env: Mapping[str, str], session: sessions.Session) -> None:
    if inputs.mode == "test" and not inputs.candidate and (inputs.shard or inputs.models):
        given = "shard" if inputs.shard else "models"
        raise UsageError(f"""
            mode test was given the input {given} but no candidate: {given} selects part of a staged
            candidate. Give candidate: the stage job's `candidate` output (needs.stage.outputs.candidate),
            or leave {given} out to test this checkout's release.""")
    if inputs.mode == "test" and inputs.candidate:
        test_shard(inputs, settings, env, session)
        return
    if inputs.mode == "promote":
        promote(inputs, settings, env, session)
        return
    pushes = inputs.pushes(event)
    repository = release.settings_repository(
        settings,
        env,
        required=pushes or inputs.mode in ("rollback", "stage"),
        how="the action's input repository",
        username=inputs.username,
        password=inputs.password,
    )
    if inputs.mode == "rollback":
        if not inputs.rollback_to:
            raise UsageError("mode rollback needs the input rollback-to: the release X.Y.Z to point the channel at.")
        assert repository is not None
        release.run_rollback(
            release.RollbackRequest(
                repository,
                inputs.rollback_to,
                settings.publish,
                inputs.verify,
                release.model_repository(settings, INPUT) if inputs.verify else None,
                settings.server,
                verify_key=settings.verify_key,
            ),
            session,
        )
        return
    if inputs.mode == "stage":
        stage(inputs, settings, event, env, repository, session)
        return
    release.run_release(
        release.ReleaseRequest(
            **_from_checkout(inputs, settings, event, env),
            repository=repository,
            push=pushes,
            commit=inputs.commit,
            server=settings.server,
            gates=GateOptions.from_settings(settings, env),
            push_target=PushTarget.from_env(env),
            **_signing(settings, env, pushes),
        ),
        session,
    )


class _FromCheckout(TypedDict):
    """What a release and a stage of the checkout are made from: the fields of the same name of
    ReleaseRequest and StageRequest, as the action gives them."""

    model_repository: Path
    base: str | None
    head: str
    image: ImageOptions
    publish: PublishOptions
    source: str


def _from_checkout(inputs: ActionInputs, settings: Settings, event: Event, env: Mapping[str, str]) -> _FromCheckout:
    """The checkout's model repository, its commits since the last release (a pull request's: since
    its base), the image built from them, how it is published, and the source URL for its label."""
    return _FromCheckout(
        model_repository=release.model_repository(settings, INPUT),
        base=inputs.base_ref or event.base,
        head="HEAD",
        image=settings.image,
        publish=settings.publish,
        source=release.provenance_source(env),
    )


def _signing(settings, env: Mapping[str, str], signs: bool = True) -> dict:
    """How the evidence is signed (the key read and checked now, before anything is pushed), and
    the builder: this action."""
    from triton_release.evidence.signing import prepare
    from triton_release.evidence.statements import Invocation

    if not signs:
        return {}
    return {
        "signing": prepare(settings.signing, settings.signing_key, env),
        "invocation": Invocation.from_env(env, action=True),
    }


@contextmanager
def key_files(inputs: ActionInputs, env: Mapping[str, str]) -> Iterator[dict]:
    """The signing-key input (a PEM from a secret) in a file only this user can read, and the
    verify-key input when it is a PEM rather than a path: the settings they make. The files are
    removed when the run ends; the key's text is never printed (main masks it first)."""
    made: list[str] = []
    keys: dict = {}
    folder = env.get("RUNNER_TEMP") or None
    try:
        for name, text in (("signing_key", inputs.signing_key), ("verify_key", inputs.verify_key)):
            if not text:
                continue
            if name == "verify_key" and not text.startswith("-----BEGIN"):
                keys[name] = text  # a path in the workspace
                continue
            descriptor, path = tempfile.mkstemp(
                prefix="triton-release-", suffix=".pem", dir=folder if folder and os.path.isdir(folder) else None
            )
            made.append(path)
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:  # mkstemp: mode 0600
                out.write(text.strip() + "\n")
            keys[name] = path
        yield keys
    finally:
        for path in made:
            try:
                os.unlink(path)
            except OSError:
                pass


def stage(
    inputs: ActionInputs, settings, event: Event, env: Mapping[str, str], repository, session: sessions.Session
) -> None:
    """mode stage: build once, push the candidate, plan the shards (the `shards` output)."""
    from triton_release.fanout.stage import StageRequest, run_stage
    from triton_release.models.shards import check_counts

    check_counts(inputs.shards, inputs.max_models_per_shard)
    run_stage(
        StageRequest(
            **_from_checkout(inputs, settings, event, env),
            repository=repository,
            shards=inputs.shards,
            max_models=inputs.max_models_per_shard,
            **_signing(settings, env),
        ),
        session,
    )


def _candidate(inputs: ActionInputs, env: Mapping[str, str]):
    """The candidate input's repository (with the credentials) and digest."""
    from triton_release.contract import parse_digest_ref
    from triton_release.registry.client import open_repository

    found = parse_digest_ref(inputs.candidate)
    if found is None:
        raise UsageError(
            f"the action's input candidate is {inputs.candidate!r}; give REPO@sha256:<64 hex digits>, "
            "the stage job's `candidate` output."
        )
    return open_repository(found[0], env, inputs.username or None, inputs.password or None), found[1]


def test_shard(inputs: ActionInputs, settings, env: Mapping[str, str], session: sessions.Session) -> None:
    """mode test with a candidate: one shard of it, its record written to the registry."""
    from triton_release.fanout.stage import CandidateTestRequest, run_candidate_test

    repository, digest = _candidate(inputs, env)
    run_candidate_test(
        CandidateTestRequest(
            model_repository=release.model_repository(settings, INPUT),
            repository=repository,
            digest=digest,
            shard=inputs.shard or None,
            models=tuple(m for m in inputs.models.split(",") if m),
            server=settings.server,
            gates=GateOptions.from_settings(settings, env),
        ),
        session,
    )


def promote(inputs: ActionInputs, settings, env: Mapping[str, str], session: sessions.Session) -> None:
    """mode promote: the candidate becomes release X.Y.Z once every shard's record passed."""
    from triton_release.fanout.promote import PromoteRequest, gpu_policy, run_promote

    if not inputs.candidate:
        raise UsageError("mode promote needs the input candidate: the stage job's `candidate` output.")
    if not inputs.version:
        raise UsageError("mode promote needs the input version: the stage job's `version` output.")
    repository, digest = _candidate(inputs, env)
    run_promote(
        PromoteRequest(
            repository,
            digest,
            inputs.version,
            settings.publish,
            commit=inputs.commit,
            model_repository=release.model_repository(settings, INPUT) if inputs.commit else None,
            gpu_models=gpu_policy(settings),
            **_signing(settings, env),
        ),
        session,
    )


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
