"""One request builder per command (requests.py), called by both doors: the command line and the
action's inputs that say the same thing build the same request, and the run is the same runner."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from triton_release import requests
from triton_release.action.main import main as action_main
from triton_release.cli.main import main as cli_main
from triton_release.errors import UsageError
from triton_release.evidence.statements import ACTION_BUILDER, CLI_BUILDER
from triton_release.settings import resolve

REPO = "127.0.0.1:5000/team/models"
CANDIDATE = f"{REPO}@sha256:{'a' * 64}"

# (the command line, the action's inputs that say the same, the runners that receive the request)
CASES = {
    "release": (
        ["release", "--to", REPO, "--base", "abc"],
        {"repository": REPO, "base-ref": "abc", "push": "true"},
        ["triton_release.release.run_release"],
    ),
    "rollback": (
        ["rollback", "--repo", REPO, "--to-version", "1.0.0"],
        {"mode": "rollback", "repository": REPO, "rollback-to": "1.0.0"},
        ["triton_release.release.run_rollback"],
    ),
    "stage": (
        ["stage", "--to", REPO, "--base", "abc", "--shards", "2"],
        {"mode": "stage", "repository": REPO, "base-ref": "abc", "shards": "2"},
        ["triton_release.cli.stage.run_stage", "triton_release.fanout.stage.run_stage"],
    ),
    "test": (
        ["test", "--image", CANDIDATE, "--shard", "shard-1"],
        {"mode": "test", "candidate": CANDIDATE, "shard": "shard-1"},
        ["triton_release.fanout.stage.run_candidate_test"],
    ),
    "promote": (
        ["promote", "--candidate", CANDIDATE, "--version", "1.2.0"],
        {"mode": "promote", "candidate": CANDIDATE, "version": "1.2.0"},
        ["triton_release.cli.promote.run_promote", "triton_release.fanout.promote.run_promote"],
    ),
}


def _captured(monkeypatch, runners: list[str]) -> list:
    made: list = []
    for runner in runners:
        monkeypatch.setattr(runner, lambda request, _session: made.append(request))
    return made


def _comparable(request):
    """The request without what tells the doors apart on purpose: who built it (the CLI or the
    action) and the environment the latency gate's measurement runs in; the registry repository
    by its name (a client holds a connection)."""
    request = replace(request, repository=str(request.repository))
    if hasattr(request, "gates"):
        request = replace(request, gates=replace(request.gates, latency=replace(request.gates.latency, env={})))
    if hasattr(request, "evidence"):
        evidence = request.evidence
        request = replace(request, evidence=(evidence.signing.mode, dict(evidence.settings)))
    return request


@pytest.mark.parametrize("command", sorted(CASES))
def test_the_cli_and_the_action_build_the_same_request(command, tmp_path, monkeypatch):
    argv, inputs, runners = CASES[command]
    (tmp_path / "model_repository").mkdir()
    monkeypatch.chdir(tmp_path)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({}))
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    made = _captured(monkeypatch, runners)

    assert cli_main(argv, env) == 0
    action_env = {
        **env,
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKSPACE": str(tmp_path),
        "INPUT_PUSH-COMMIT": "false",  # the action's default is true, the CLI's false
        **{f"INPUT_{name.upper()}": value for name, value in inputs.items()},
    }
    assert action_main(action_env) == 0

    by_cli, by_action = made
    assert type(by_cli) is type(by_action)
    assert _comparable(by_cli) == _comparable(by_action)
    if hasattr(by_cli, "evidence"):
        assert (by_cli.evidence.invocation.builder_id, by_action.evidence.invocation.builder_id) == (
            CLI_BUILDER,
            ACTION_BUILDER,
        )


def test_the_evidence_records_the_build_and_the_test_settings_of_a_release(tmp_path):
    settings = resolve({"base_image": "tritonserver:x", "channel": "stable", "max_drift": "0.1"}, cwd=tmp_path)
    recorded = requests.evidence(settings, {}, requests.CLI, test=True).settings
    assert recorded["base_image"] == "tritonserver:x"
    assert recorded["build"]["channel"] == "stable"
    assert recorded["test"]["max_drift"] == 0.1
    assert "test" not in requests.evidence(settings, {}, requests.CLI).settings
    assert requests.evidence(settings, {}, requests.CLI, records=False).settings == {}


def test_a_release_that_does_not_push_is_unsigned_and_needs_no_registry(tmp_path):
    (tmp_path / "models").mkdir()
    settings = resolve({"model_repository": str(tmp_path / "models")}, cwd=tmp_path)
    request = requests.release_request(settings, base=None, head="HEAD", push=False, commit=False, env={})
    assert request.repository is None
    assert request.evidence.signing.mode == "none" and request.evidence.invocation.builder_id == CLI_BUILDER


@pytest.mark.parametrize(
    ("door", "named"), [(requests.CLI, "--to REPO"), (requests.Door(action=True), "the action's input repository")]
)
def test_a_missing_repository_is_named_as_each_door_takes_it(door, named, tmp_path):
    (tmp_path / "models").mkdir()
    settings = resolve({"model_repository": str(tmp_path / "models")}, cwd=tmp_path)
    with pytest.raises(UsageError, match=f"give {named}"):
        requests.release_request(settings, base=None, head="HEAD", push=True, commit=False, env={}, door=door)


def test_the_environment_gives_the_source_label_only_inside_github_actions():
    assert requests.provenance_source({}) == ""
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "org/models"}
    assert requests.provenance_source(env) == "https://github.com/org/models"


def test_registry_ca_reaches_the_registry_client_from_the_flag_the_input_and_the_settings_file(tmp_path, monkeypatch):
    """--registry-ca FILE, the action's input registry-ca (the PEM itself) and registry_ca: in
    triton-release.yaml (a path relative to it) each give the client the CA it trusts."""
    from support.tls import PrivateCA

    ca = PrivateCA(tmp_path / "ca")
    (tmp_path / "model_repository").mkdir()
    monkeypatch.chdir(tmp_path)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({}))
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    made = _captured(monkeypatch, CASES["release"][2])
    assert cli_main(["release", "--to", REPO, "--base", "abc", "--registry-ca", str(ca.cert)], env) == 0
    action_env = {
        **env,
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_WORKSPACE": str(tmp_path),
        "INPUT_REPOSITORY": REPO,
        "INPUT_REGISTRY-CA": ca.pem,
    }
    assert action_main(action_env) == 0
    (tmp_path / "triton-release.yaml").write_text("registry_ca: ca/ca.crt\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert (
        cli_main(
            [
                "release",
                "--to",
                REPO,
                "--base",
                "abc",
                "--config",
                "../triton-release.yaml",
                "--model-repository",
                "../model_repository",
            ],
            env,
        )
        == 0
    )
    assert [request.repository.trust.ca.strip() for request in made] == [ca.pem.strip()] * 3
