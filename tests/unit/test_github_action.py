"""The action's adapter: inputs and the event become CLI arguments, outputs and a summary."""

from __future__ import annotations

import json

import pytest

from triton_release.action import main as github


@pytest.fixture
def actions_env(tmp_path, monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("INPUT_"):
            monkeypatch.delenv(key)

    def setup(event_name: str, payload: dict, **inputs: str):
        event = tmp_path / "event.json"
        event.write_text(json.dumps(payload))
        monkeypatch.setenv("GITHUB_EVENT_NAME", event_name)
        monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
        for key, value in inputs.items():
            monkeypatch.setenv(f"INPUT_{key.upper().replace('_', '-')}", value)
    return setup


def test_a_push_releases_everything_since_the_last_release_not_since_before(actions_env):
    """A push's `before` would miss a change whose release failed on the previous push."""
    actions_env("push", {"before": "a" * 40}, image="ghcr.io/org/models", base_image="tritonserver:x")
    argv = github.command("r.json")
    assert argv[:1] == ["release"] and "--base" not in argv
    assert argv[argv.index("--to") + 1] == "ghcr.io/org/models"
    assert argv[argv.index("--base-image") + 1] == "tritonserver:x"
    assert "--no-push" not in argv


def test_settings_left_to_triton_release_yaml_are_not_passed(actions_env):
    actions_env("push", {}, image="ghcr.io/org/models")
    argv = github.command("r.json")
    for flag in ("--model-repository", "--base-image", "--stub", "--channel", "--load-timeout"):
        assert flag not in argv


def test_an_unknown_mode_is_a_usage_error(actions_env):
    actions_env("push", {}, mode="tests")
    with pytest.raises(github.UsageError, match="release, test, rollback"):
        github.command("r.json")


def test_a_pull_request_tests_against_its_base_and_never_pushes(actions_env):
    actions_env("pull_request", {"pull_request": {"base": {"sha": "b" * 40}}}, push="")
    argv = github.command("r.json")
    assert argv[argv.index("--base") + 1] == "b" * 40 and "--no-push" in argv


def test_workflow_dispatch_defaults_to_the_last_release_and_pushes(actions_env):
    actions_env("workflow_dispatch", {"inputs": {}}, commit="true")
    argv = github.command("r.json")
    assert "--base" not in argv and "--no-push" not in argv and "--commit" in argv


def test_mode_test_and_push_false_never_push(actions_env):
    actions_env("push", {"before": "a" * 40}, mode="test")
    assert "--no-push" in github.command("r.json")
    actions_env("push", {"before": "a" * 40}, mode="release", push="false")
    assert "--no-push" in github.command("r.json")


def test_rollback_mode(actions_env):
    actions_env("workflow_dispatch", {}, mode="rollback", image="ghcr.io/org/models", rollback_to="1.2.0",
                channel="stable", verify="true")
    argv = github.command("r.json")
    assert argv[:3] == ["rollback", "--to-version", "1.2.0"]
    assert argv[argv.index("--repo") + 1] == "ghcr.io/org/models" and "--verify" in argv
    assert argv[argv.index("--channel") + 1] == "stable"


def test_outputs_are_written_with_delimiters(tmp_path, monkeypatch):
    out = tmp_path / "output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    github.write_outputs({"version": "1.1.0", "image": "r:1.1.0", "digest": "sha256:x", "changed_models": ["a"]},
                         "report.json")
    text = out.read_text()
    assert "version<<" in text and "\n1.1.0\n" in text and '\n["a"]\n' in text and "\nreport.json\n" in text


def test_summary_names_models_versions_stub_cases_and_tags():
    report = {"changed_models": ["a"], "steps": {
        "changed": {"previous_version": "1.0.0", "version": "1.1.0", "release": {"kind": "minor"}},
        "bump": {"bumps": [{"model": "a", "from": 1, "to": 2}]},
        "build": {"stub": {"kept": False, "origin": "nvidia-pytriton 0.7.0", "provider": "wheel",
                           "target_python": "3.11", "triton_version": "2.51.0"}},
        "test": {"cases": [{"case": "a/basic", "passed": True, "latency_ms": 1.5,
                            "outputs": [{"max_abs_diff": 0.0}]}]},
        "push": {"image": "r:1.1.0", "digest": "sha256:x", "tags": ["1.1.0", "latest"]}}}
    text = github.summary(report)
    for expected in ("**Changed models:** `a`", "1.0.0 -> **1.1.0** (minor)", "version 1 -> 2",
                     "nvidia-pytriton 0.7.0 (wheel)", "| `a/basic` | pass | 1.5 | 0 |", "`1.1.0`, `latest`"):
        assert expected in text


def test_a_push_event_without_before_releases_from_the_last_release(actions_env):
    actions_env("push", {})
    assert "--base" not in github.command("r.json")
