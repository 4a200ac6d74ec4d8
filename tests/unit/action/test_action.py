"""The action: typed inputs from INPUT_* and the event, typed outputs checked before they are
written, and the step summary rendered from the run's results."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest

from support.reports import read_report
from triton_release.action.inputs import ActionInputs, Event
from triton_release.action.main import main
from triton_release.action.outputs import ActionOutputs
from triton_release.action.summary import summary
from triton_release.errors import UsageError
from triton_release.session import Report, StepRecord
from triton_release.settings import resolve


def env_for(tmp_path, event_name: str, payload: dict, **inputs: str) -> dict:
    event = tmp_path / "event.json"
    event.write_text(json.dumps(payload))
    env = {"GITHUB_EVENT_NAME": event_name, "GITHUB_EVENT_PATH": str(event), "HOME": str(tmp_path)}
    env.update({f"INPUT_{key.upper().replace('_', '-')}": value for key, value in inputs.items()})
    return env


def test_a_push_releases_everything_since_the_last_release_not_since_before(tmp_path):
    """A push's `before` would miss a change whose release failed on the previous push."""
    env = env_for(tmp_path, "push", {"before": "a" * 40}, repository="ghcr.io/org/models", base_image="tritonserver:x")
    inputs, event = ActionInputs.from_env(env), Event.from_env(env)
    assert event.base is None and inputs.pushes(event)
    assert inputs.settings == {"repository": "ghcr.io/org/models", "base_image": "tritonserver:x"}


def test_settings_left_empty_are_left_to_triton_release_yaml(tmp_path):
    inputs = ActionInputs.from_env(env_for(tmp_path, "push", {}, repository="r", stub="", channel=""))
    assert inputs.settings == {"repository": "r"}


def test_the_old_image_input_still_works_with_a_warning(tmp_path):
    inputs = ActionInputs.from_env(env_for(tmp_path, "push", {}, image="ghcr.io/org/models"))
    settings = resolve({}, action_inputs=inputs.settings, cwd=tmp_path)
    assert settings.repository == "ghcr.io/org/models"
    assert settings.warnings == ("action input: 'image' is deprecated; call it 'repository'",)


@pytest.mark.parametrize(
    ("inputs", "match"), [({"mode": "tests"}, "release, test, rollback"), ({"push": "maybe"}, "true or false")]
)
def test_bad_inputs_are_usage_errors(tmp_path, inputs, match):
    with pytest.raises(UsageError, match=match):
        ActionInputs.from_env(env_for(tmp_path, "push", {}, **inputs))


def test_a_pull_request_tests_against_its_base_and_never_pushes(tmp_path):
    env = env_for(tmp_path, "pull_request", {"pull_request": {"base": {"sha": "b" * 40}}}, push="")
    inputs, event = ActionInputs.from_env(env), Event.from_env(env)
    assert event.base == "b" * 40 and not inputs.pushes(event)


def test_mode_test_and_push_false_never_push(tmp_path):
    for extra in ({"mode": "test"}, {"push": "false"}):
        env = env_for(tmp_path, "push", {}, **extra)
        assert not ActionInputs.from_env(env).pushes(Event.from_env(env))
    env = env_for(tmp_path, "workflow_dispatch", {}, commit="true")
    inputs = ActionInputs.from_env(env)
    assert inputs.pushes(Event.from_env(env)) and inputs.commit


def test_a_bad_input_still_writes_the_error_the_report_and_the_outputs(tmp_path, capsys):
    out, summary_file = tmp_path / "output", tmp_path / "summary.md"
    env = env_for(tmp_path, "push", {}, mode="tests", password="hunter2-secret")
    env.update({"GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary_file), "GITHUB_WORKSPACE": str(tmp_path)})
    assert main(env) == 2
    printed = capsys.readouterr()
    assert "::error::the action's input mode is 'tests'" in printed.err
    assert "hunter2-secret" not in printed.out.replace("::add-mask::hunter2-secret", "") + printed.err
    assert read_report(tmp_path / "triton-release-report.json")["error"]["exit_code"] == 2
    assert "version<<" in out.read_text() and "**Failed** (exit 2)" in summary_file.read_text()


@pytest.mark.parametrize(("given", "missing"), [("password", "username"), ("username", "password")])
def test_a_lone_username_or_password_input_is_a_warning_naming_the_missing_one(tmp_path, capsys, given, missing):
    env = env_for(tmp_path, "workflow_dispatch", {}, mode="rollback", **{given: "hunter2-secret"})
    env["GITHUB_WORKSPACE"] = str(tmp_path)
    assert main(env) == 2  # no repository to roll back: the warning comes first all the same
    printed = capsys.readouterr()
    assert f"::warning::the action's input {given} is given without the action's input {missing}" in printed.out
    assert "hunter2-secret" not in printed.out.replace("::add-mask::hunter2-secret", "") + printed.err


def test_outputs_are_checked_and_written_with_delimiters(tmp_path):
    report = Report(
        "release",
        facts={
            "version": "1.1.0",
            "image": "r:1.1.0",
            "digest": "sha256:" + "0" * 64,
            "changed_models": ["a"],
            "released": True,
        },
    )
    out = tmp_path / "output"
    ActionOutputs.from_report(report, "report.json").write(str(out))
    text = out.read_text()
    assert "version<<" in text and "\n1.1.0\n" in text and '\n["a"]\n' in text and "\nreport.json\n" in text
    odd = ActionOutputs.from_report(Report("release", facts={"digest": "sha256:x", "changed_models": ["a"]}), "r.json")
    assert odd.problems() == ["digest 'sha256:x' is not a sha256 digest"]
    assert odd.valid().digest == "" and odd.valid().changed_models == ("a",) and odd.valid().report == "r.json"


def test_summary_names_models_versions_stub_cases_and_tags_escaping_user_text():
    report = Report("release")
    changed = NS(
        found=NS(models={"a": None}, ensembles=("pipe",)),
        plan=NS(previous="1.0.0", version="1.1.0"),
        kind=NS(kind="minor"),
    )
    case = NS(
        case="a/basic", passed=False, latency_ms=1.5, message="got | 2\n::warning::x", outputs=(NS(max_abs_diff=0.0),)
    )
    results = {
        "changed": changed,
        "bump": NS(bumps=(NS(model="a", from_version=1, to_version=2),)),
        "build": NS(
            stub=NS(
                kept=False,
                origin="nvidia-pytriton 0.7.0",
                provider="wheel",
                target_python="3.11",
                triton_version="2.51.0",
            )
        ),
        "test": NS(cases=(case,)),
        "push": NS(repository="r", version="1.1.0", digest="sha256:x"),
        "tags": NS(tags=("1.1", "latest")),
    }
    for name, result in results.items():
        report.steps[name] = StepRecord(result, 0.1, True)
    text = summary(report)
    for expected in (
        "**Changed models:** `a`",
        "`pipe`: ensemble using a changed model",
        "1.0.0 -> **1.1.0** (minor)",
        "version 1 -> 2",
        "nvidia-pytriton 0.7.0 (wheel)",
        "| `a/basic` | **fail**: got \\| 2 ::warning::x | 1.5 | 0 |",
        "`1.1.0`, `1.1`, `latest`",
    ):
        assert expected in text, expected


def test_the_summary_names_versions_carried_from_the_registry_and_an_uncommitted_bump():
    report = Report("release")
    bump = NS(
        bumps=(NS(model="a", from_version=1, to_version=3),),
        carried=(NS(model="a", version=2, release="127.0.0.1:5000/t/m:1.1.0"),),
    )
    report.steps["bump"] = StepRecord(bump, 0.1, True)
    text = summary(report)
    assert "`a`: version 1 -> 3" in text
    assert "`a`: version 2 carried from `127.0.0.1:5000/t/m:1.1.0`" in text
    assert "The bump is not committed" in text
