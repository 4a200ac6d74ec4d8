"""The action's and the CLI's side of a release over many runners: the stage, test and promote
modes' inputs, the candidate and shards outputs, the summary, and the arguments refused before
anything runs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from support.stack import ROOT
from triton_release.action.inputs import MODES, ActionInputs
from triton_release.action.main import main as action_main
from triton_release.action.outputs import ActionOutputs
from triton_release.action.summary import summary
from triton_release.cli.main import main
from triton_release.errors import UsageError
from triton_release.models.shards import Shard
from triton_release.registry.candidate import Candidate
from triton_release.registry.candidate.stage import Pulled, Staged
from triton_release.session import Report, StepRecord

DIGEST = "sha256:" + "a" * 64
CANDIDATE = f"127.0.0.1:5000/team/models@{DIGEST}"


def env_for(tmp_path, **inputs: str) -> dict:
    event = tmp_path / "event.json"
    event.write_text("{}")
    env = {
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_EVENT_PATH": str(event),
        "HOME": str(tmp_path),
        "GITHUB_WORKSPACE": str(tmp_path),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
    }
    env.update({f"INPUT_{key.upper().replace('_', '-')}": value for key, value in inputs.items()})
    return env


def test_the_stage_test_and_promote_inputs(tmp_path):
    inputs = ActionInputs.from_env(env_for(tmp_path, mode="test", candidate=CANDIDATE, shard="shard-2", models="a,b"))
    assert (inputs.mode, inputs.candidate, inputs.shard, inputs.models) == ("test", CANDIDATE, "shard-2", "a,b")
    inputs = ActionInputs.from_env(env_for(tmp_path, mode="stage", max_models_per_shard="10"))
    assert inputs.max_models_per_shard == 10 and inputs.shards is None
    assert {"stage", "test", "promote"} <= set(MODES)
    with pytest.raises(UsageError, match="shards is 'many'; give a whole number"):
        ActionInputs.from_env(env_for(tmp_path, mode="stage", shards="many"))


def test_every_input_and_output_of_the_modes_is_declared_in_action_yml():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    for name in ("candidate", "shard", "models", "shards", "max-models-per-shard", "version"):
        assert name in action["inputs"], name
    for name in ("candidate", "shards", "version", "changed-models"):
        assert name in action["outputs"], name
    assert all(mode in action["inputs"]["mode"]["description"] for mode in MODES)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"mode": "promote"}, "needs the input candidate"),
        ({"mode": "promote", "candidate": CANDIDATE}, "needs the input version"),
        ({"mode": "test", "candidate": "127.0.0.1:5000/team/models:latest"}, "give REPO@sha256"),
        ({"mode": "stage", "shards": "2", "max_models_per_shard": "3", "repository": "127.0.0.1:5000/x/y"}, "not both"),
        ({"mode": "test", "shard": "shard-1"}, "was given the input shard but no candidate"),
        ({"mode": "test", "models": "a,b"}, "was given the input models but no candidate"),
    ],
)
def test_a_mode_without_what_it_needs_is_a_usage_error_with_outputs_written(tmp_path, capsys, inputs, match):
    (tmp_path / "model_repository").mkdir()
    env = env_for(tmp_path, **inputs)
    assert action_main(env) == 2
    assert match in capsys.readouterr().err
    assert "candidate<<" in (tmp_path / "output").read_text()


def staged_report() -> Report:
    shards = (Shard("shard-1", ("a",), ("a",), 2, False), Shard("shard-2", ("b", "pipe"), ("b", "c", "pipe"), 3, True))
    candidate = Candidate("127.0.0.1:5000/team/models", DIGEST, "1.1.0", "f" * 40, "e" * 40, "", shards, ("a", "b"))
    staged = Staged(candidate, "candidate-ffffffffffff", layers_uploaded=1)
    report = Report("stage")
    report.record("candidate", StepRecord(staged, 0.1, True))
    return report


def test_the_candidate_and_the_shards_outputs_make_a_matrix(tmp_path):
    out = tmp_path / "output"
    outputs = ActionOutputs.from_report(staged_report(), "report.json")
    assert outputs.problems() == []
    outputs.valid().write(str(out))
    text = out.read_text()
    assert f"\n{CANDIDATE}\n" in text and "\n1.1.0\n" in text
    line = next(line for line in text.splitlines() if line.startswith("[{"))
    assert json.loads(line) == [
        {"name": "shard-1", "models": "a", "load": "a", "cases": 2, "gpu": False},
        {"name": "shard-2", "models": "b,pipe", "load": "b,c,pipe", "cases": 3, "gpu": True},
    ]


def test_outputs_of_other_modes_have_an_empty_candidate_and_no_shards():
    outputs = ActionOutputs.from_report(Report("release", facts={"version": "1.0.0"}), "r.json")
    assert outputs.values()["candidate"] == "" and outputs.values()["shards"] == "[]"
    odd = ActionOutputs.from_report(Report("stage", facts={"candidate": "r:latest", "shards": [{"name": 1}]}), "r")
    assert len(odd.problems()) == 2 and odd.valid().candidate == "" and odd.valid().shards == ()


def test_the_summary_shows_the_candidate_and_its_shards():
    text = summary(staged_report())
    assert f"**Candidate:** `{CANDIDATE}`" in text and "release **1.1.0**" in text
    assert "| shard-2 | b, pipe | 3 | GPU |" in text


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["test", "--image", "local/models:candidate", "--shard", "shard-1"], "--shard tests a staged candidate"),
        (["test", "--image", CANDIDATE, "--shard", "../x"], "is not a shard name"),
        (["test", "--image", CANDIDATE, "--shard", "shard-1", "-k", "basic"], "-k or --shard"),
        (["stage", "--to", "127.0.0.1:5000/x/y", "--shards", "0"], "1 to 256"),
        (["stage", "--to", "127.0.0.1:5000/x/y", "--shards", "2", "--max-models-per-shard", "3"], "not allowed with"),
    ],
)
def test_cli_arguments_refused_before_anything_runs(tmp_path, monkeypatch, capsys, argv, match):
    (tmp_path / "model_repository").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(argv, env={"HOME": str(tmp_path)}) == 2
    assert match in capsys.readouterr().err


def test_the_example_workflow_tests_each_shard_on_its_runner_then_promotes():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release-matrix.yml").read_text())
    jobs = workflow["jobs"]
    assert set(jobs) == {"stage", "test", "promote"}
    assert jobs["test"]["strategy"]["matrix"]["include"] == "${{ fromJSON(needs.stage.outputs.shards) }}"
    assert "matrix.gpu" in jobs["test"]["runs-on"] and "self-hosted" in jobs["test"]["runs-on"]
    assert jobs["promote"]["needs"] == ["stage", "test"]
    modes = {name: next(s["with"]["mode"] for s in job["steps"] if s.get("uses") == "./") for name, job in jobs.items()}
    assert modes == {"stage": "stage", "test": "test", "promote": "promote"}


def test_a_shards_test_outputs_the_candidates_changed_models():
    shards = (Shard("shard-1", ("a", "caller"), ("a", "caller"), 2, False),)
    candidate = Candidate(
        "127.0.0.1:5000/team/models",
        DIGEST,
        "1.1.0",
        "f" * 40,
        "e" * 40,
        "",
        shards,
        ("a", "caller"),
        changed_models=("a",),
    )
    report = Report("test")
    report.record("pull", StepRecord(Pulled(candidate.ref, "sha256:" + "1" * 64, "f" * 40, candidate), 0.1, True))
    assert ActionOutputs.from_report(report, "report.json").changed_models == ("a",)
    earlier = replace(candidate, changed_models=None)  # staged before the label: the models it tests
    report.record("pull", StepRecord(Pulled(earlier.ref, "sha256:" + "1" * 64, "f" * 40, earlier), 0.1, True))
    assert ActionOutputs.from_report(report, "report.json").changed_models == ("a", "caller")
