"""The action's outputs as the actions users chain write theirs (docker/build-push-action,
docker/metadata-action): released, tags, image, digest, previous-version, previous-digest,
version only when something was released or rolled back, planned-version always; each checked
before it is written. And the push-commit input that sends the release commit back."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace as NS

import pytest
import yaml

from support.stack import ROOT
from triton_release.action.inputs import ActionInputs
from triton_release.action.outputs import ActionOutputs
from triton_release.action.summary import summary
from triton_release.cli.main import main as cli_main
from triton_release.errors import UsageError
from triton_release.history.push_back import PushedBack
from triton_release.registry.publish import PushResult, Tagged
from triton_release.registry.rollback import Rollback
from triton_release.session import Report, StepRecord
from triton_release.settings import resolve

REPO = "127.0.0.1:5000/team/models"
NEW, OLD = "sha256:" + "1" * 64, "sha256:" + "0" * 64
SHA = "f" * 40


def written(outputs: ActionOutputs, tmp_path, name: str = "output") -> dict[str, str]:
    """$GITHUB_OUTPUT as the runner reads it: name<<DELIMITER, the value's lines, DELIMITER."""
    path = tmp_path / name
    outputs.valid().write(str(path))
    return {key: value for key, _, value in re.findall(r"^([\w-]+)<<(\S+)\n(.*?)\n\2$", path.read_text(), re.M | re.S)}


def changed(version: str | None, previous: str | None) -> NS:
    return NS(
        found=NS(models={"a": None}, ensembles=()),
        plan=NS(previous=previous, version=version),
        kind=NS(kind="minor"),
        facts=lambda: {"changed_models": ["a"], "version": version},
    )


def run(command: str, *steps: tuple[str, object], ok: bool = True, **facts) -> Report:
    """A report as the session leaves it: each step's result recorded (its facts taken) in order."""
    report = Report(command, facts=dict(facts))
    for name, result in steps:
        report.record(name, StepRecord(result, 0.1, ok))
    return report


def released_report() -> Report:
    tagged = Tagged(REPO, "1.1.0", ("1.1", "1", f"sha-{SHA[:12]}", "latest"), OLD, "1.0.0", OLD)
    back = PushedBack(
        "pushed",
        "origin",
        "main",
        "v1.1.0",
        (f"{SHA}:refs/heads/main", "refs/tags/v1.1.0:refs/tags/v1.1.0"),
        atomic=True,
    )
    return run(
        "release",
        ("changed", changed("1.1.0", "1.0.0")),
        ("push", PushResult(REPO, "1.1.0", NEW, 1, 0, 2)),
        ("tags", tagged),
        ("push-back", back),
    )


def test_a_release_writes_every_output_a_chained_step_reads(tmp_path):
    outputs = ActionOutputs.from_report(released_report(), "report.json")
    assert outputs.problems() == []
    values = written(outputs, tmp_path)
    assert values["released"] == "true"
    assert values["version"] == values["planned-version"] == "1.1.0"
    assert values["image"] == f"{REPO}:1.1.0" and values["digest"] == NEW
    assert values["tags"].splitlines() == [
        f"{REPO}:1.1.0",
        f"{REPO}:1.1",
        f"{REPO}:1",
        f"{REPO}:sha-{SHA[:12]}",
        f"{REPO}:latest",
    ]  # one per line, the channel last
    assert values["previous-version"] == "1.0.0" and values["previous-digest"] == OLD
    assert json.loads(values["changed-models"]) == ["a"] and values["report"] == "report.json"
    assert values["candidate"] == "" and values["shards"] == "[]"


def test_a_run_that_pushes_nothing_gives_the_planned_version_and_no_version(tmp_path):
    report = run("release", ("changed", changed("1.1.0", "1.0.0")), released=False)
    values = written(ActionOutputs.from_report(report, "report.json"), tmp_path)
    assert values["version"] == "" and values["planned-version"] == "1.1.0" and values["released"] == "false"
    assert values["image"] == values["digest"] == values["tags"] == values["previous-digest"] == ""
    assert values["previous-version"] == "1.0.0"  # as the plan found it


def test_a_first_release_has_no_previous_and_nothing_changed_plans_nothing(tmp_path):
    first = run(
        "release",
        ("changed", changed("1.0.0", None)),
        ("push", PushResult(REPO, "1.0.0", NEW, 3, 0, 0)),
        ("tags", Tagged(REPO, "1.0.0", ("1.0", "1", "latest"), None)),
    )
    values = written(ActionOutputs.from_report(first, "r.json"), tmp_path)
    assert values["version"] == "1.0.0" and values["previous-version"] == values["previous-digest"] == ""
    nothing = written(
        ActionOutputs.from_report(run("release", ("changed", changed(None, "1.0.0")), released=False), "r.json"),
        tmp_path,
        "nothing",
    )
    assert nothing["version"] == nothing["planned-version"] == "" and nothing["released"] == "false"


def test_a_push_that_failed_after_x_y_z_went_up_still_says_released():
    report = run("release", ("changed", changed("1.1.0", "1.0.0")), ("push", PushResult(REPO, "1.1.0", NEW, 1, 0, 2)))
    report.record("tags", StepRecord(None, 0.1, False, 3))
    outputs = ActionOutputs.from_report(report, "r.json")
    assert outputs.released and outputs.version == "1.1.0" and outputs.tags == (f"{REPO}:1.1.0",)
    assert outputs.previous_version == "1.0.0" and outputs.previous_digest == ""


def test_a_rollback_gives_its_version_its_channel_and_the_digest_to_roll_forward_with(tmp_path):
    report = run("rollback", ("rollback", Rollback(REPO, "latest", "1.0.0", OLD, NEW)))
    values = written(ActionOutputs.from_report(report, "r.json"), tmp_path)
    assert values["version"] == values["planned-version"] == "1.0.0" and values["released"] == "false"
    assert values["tags"] == f"{REPO}:latest" and values["digest"] == OLD and values["previous-digest"] == NEW


def test_values_that_break_their_promise_are_named_and_left_empty():
    odd = ActionOutputs(
        "1.1.0",
        f"{REPO}:1.1.0",
        NEW,
        ("a",),
        "r.json",
        released=True,
        tags=(f"{REPO}:1.1.0", "two words:x", f"{REPO}:latest"),
        previous_version="one",
        previous_digest="sha256:short",
        planned_version="1.1.0",
    )
    assert odd.problems() == [
        "previous-version 'one' is not X.Y.Z",
        "previous-digest 'sha256:short' is not a sha256 digest",
        "tags holds a value that is not REPO:TAG",
    ]
    valid = odd.valid()
    assert valid.problems() == [] and valid.tags == (f"{REPO}:1.1.0", f"{REPO}:latest")
    assert (valid.previous_version, valid.previous_digest, valid.version, valid.released) == ("", "", "1.1.0", True)
    assert ActionOutputs("", "no tag here", "", (), "r").problems() == ["image 'no tag here' is not REPO:X.Y.Z"]


def test_action_yml_declares_every_output_written_and_the_push_commit_input():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert set(ActionOutputs("", "", "", (), "r").values()) == set(action["outputs"])
    for name in (
        "released",
        "tags",
        "image",
        "digest",
        "previous-version",
        "previous-digest",
        "planned-version",
        "version",
    ):
        assert action["outputs"][name]["description"], name
    assert "one per line" in action["outputs"]["tags"]["description"]
    assert action["inputs"]["push-commit"]["default"] == ""  # empty: triton-release.yaml's, else true


def env_for(tmp_path, **inputs: str) -> dict:
    env = {"GITHUB_EVENT_NAME": "push", "GITHUB_EVENT_PATH": str(tmp_path / "none.json"), "HOME": str(tmp_path)}
    env.update({f"INPUT_{key.upper().replace('_', '-')}": value for key, value in inputs.items()})
    return env


@pytest.mark.parametrize(("given", "pushes"), [("true", True), ("false", False), ("", False)])
def test_the_push_commit_input_is_the_push_commit_setting(tmp_path, given, pushes):
    inputs = ActionInputs.from_env(env_for(tmp_path, commit="true", push_commit=given))
    assert resolve({}, action_inputs=inputs.settings, cwd=tmp_path).push_commit is pushes


def test_a_push_commit_input_that_is_not_true_or_false_is_a_usage_error(tmp_path):
    inputs = ActionInputs.from_env(env_for(tmp_path, push_commit="maybe"))
    with pytest.raises(UsageError, match="push_commit='maybe' is not valid"):
        resolve({}, action_inputs=inputs.settings, cwd=tmp_path)


def test_push_commit_without_commit_on_the_command_line_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "model_repository").mkdir()
    code = cli_main(["release", "--push-commit", "--no-push", "--model-repository", str(tmp_path / "model_repository")])
    assert code == 2 and "--push-commit pushes the release commit that --commit makes" in capsys.readouterr().err


def test_the_summary_says_whether_the_release_commit_went_back():
    assert "**Pushed back** the release commit and `v1.1.0` to `origin` `main`" in summary(released_report())
    refused = PushedBack(
        "refused",
        "origin",
        "main",
        "v1.1.0",
        (f"{SHA}:refs/heads/main", "refs/tags/v1.1.0"),
        "main [remote rejected] (pre-receive hook declined)",
        True,
    )
    text = summary(run("release", ("push-back", refused)))
    assert "**Not pushed back** (refused): the release commit and `v1.1.0`: main \\[remote rejected\\]" in text
    assert "the registry keeps the record of released versions" in text


@pytest.mark.parametrize(
    ("file", "given", "pushes"),
    [
        ("push_commit: false\n", "", False),  # the file's value reaches the action
        ("", "", True),  # neither: the action pushes its commit back
        ("channel: stable\n", "", True),
        ("push_commit: false\n", "true", True),  # the input wins over the file
        ("push_commit: true\n", "false", False),
    ],
)
def test_push_commit_is_the_input_else_the_settings_file_else_true(tmp_path, monkeypatch, file, given, pushes):
    """Through the action's entry point, with the input as the runner passes it (empty when left out)."""
    from triton_release.action import main as action

    (tmp_path / "triton-release.yaml").write_text(file)
    env = env_for(tmp_path, commit="true", push_commit=given, mode="test")
    env["GITHUB_WORKSPACE"] = str(tmp_path)
    seen = []
    monkeypatch.setitem(action.MODES, "test", lambda _inputs, settings, *_rest: seen.append(settings))
    assert action.main(env) == 0
    [settings] = seen
    assert settings.push_commit is pushes and settings.publish.push_commit is pushes
