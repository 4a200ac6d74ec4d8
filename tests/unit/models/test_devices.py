"""KIND_GPU instance groups on a machine without GPUs: the config each such model is loaded with
(its groups made KIND_CPU, its environment kept), which models wait for it, the `gpus` setting and
the device requests it makes, and how the results read. Serving them is
tests/integration/test_gpu_configs.py."""

from __future__ import annotations

import io
import json
import textwrap
from types import SimpleNamespace as NS

import pytest
from google.protobuf import json_format, text_format

from support.models import PYTHON_MODEL, bls_caller_files, python_config, python_model_files, write_tree
from support.stack import ROOT
from triton_release.action.inputs import ActionInputs
from triton_release.action.summary import summary
from triton_release.cli.main import main
from triton_release.console import Console
from triton_release.errors import UsageError
from triton_release.models.config.schema import model_config_pb2
from triton_release.models.devices import ENV_PARAMETER, cpu_override, needs_gpu
from triton_release.models.inference import CaseResult
from triton_release.models.repository import Repository
from triton_release.models.suite import GoldenRun, cpu_overrides, deferred
from triton_release.server import container, readiness
from triton_release.session import Report, StepRecord
from triton_release.settings import resolve

GPU_GROUPS = 'instance_group [ { name: "main" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]\n'
PRODUCTION = (
    python_config("m")
    + textwrap.dedent("""\
    dynamic_batching { max_queue_delay_microseconds: 100 }
    parameters { key: "PRECISION" value: { string_value: "fp16" } }
    version_policy: { latest { num_versions: 2 } }
    """)
    + GPU_GROUPS
)


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def loaded(override: str) -> model_config_pb2.ModelConfig:
    """The override as Triton reads it: protobuf's JSON mapping into the model config."""
    return json_format.Parse(override, model_config_pb2.ModelConfig())


def test_a_kind_gpu_group_becomes_kind_cpu_with_its_count_and_no_gpus_every_other_field_kept():
    config = parse(PRODUCTION)
    override = loaded(cpu_override(config))
    [group] = override.instance_group
    assert group.kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert group.count == 2 and list(group.gpus) == [] and group.name == "main"
    expected = parse(PRODUCTION.replace(GPU_GROUPS, 'instance_group [ { name: "main" kind: KIND_CPU count: 2 } ]\n'))
    assert override == expected
    assert ENV_PARAMETER not in override.parameters
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU  # the model's own untouched
    text = cpu_override(config)
    assert json.loads(text)["instance_group"] == [{"name": "main", "kind": "KIND_CPU", "count": 2}]
    assert "\n" not in text


def test_only_the_gpu_groups_change():
    config = parse(
        python_config("m") + "instance_group [ { kind: KIND_CPU count: 3 }, { kind: KIND_GPU gpus: [ 1 ] } ]\n"
    )
    groups = loaded(cpu_override(config)).instance_group
    assert [(g.kind, g.count, list(g.gpus)) for g in groups] == [
        (model_config_pb2.ModelInstanceGroup.KIND_CPU, 3, []),
        (model_config_pb2.ModelInstanceGroup.KIND_CPU, 0, []),
    ]


def test_the_environment_parameter_of_the_image_s_config_is_added_or_kept():
    path = "/opt/triton-release/envs/m"
    added = loaded(cpu_override(parse(PRODUCTION), path))
    assert added.parameters[ENV_PARAMETER].string_value == path
    assert added.parameters["PRECISION"].string_value == "fp16"
    # the image's config.pbtxt appends the parameter to the user's, which may name one already: the image's wins
    own = (
        PRODUCTION
        + f'parameters {{ key: "{ENV_PARAMETER}" value: {{ string_value: "$$TRITON_MODEL_DIRECTORY/env" }} }}\n'
    )
    assert loaded(cpu_override(parse(own), path)).parameters[ENV_PARAMETER].string_value == path
    assert loaded(cpu_override(parse(own))).parameters[ENV_PARAMETER].string_value == "$$TRITON_MODEL_DIRECTORY/env"


@pytest.mark.parametrize(
    ("groups", "gpu"),
    [
        (GPU_GROUPS, True),
        ("instance_group [ { kind: KIND_CPU count: 2 }, { kind: KIND_GPU count: 1 } ]\n", True),
        ("instance_group [ { kind: KIND_CPU count: 2 } ]\n", False),
        ("instance_group [ { kind: KIND_AUTO count: 2 } ]\n", False),  # Triton falls back to the CPU itself
        ("instance_group [ { count: 2 } ]\n", False),  # KIND_AUTO by default
        ("", False),
    ],
)
def test_which_configs_need_the_override(groups, gpu):
    assert needs_gpu(parse(python_config("m") + groups)) is gpu


def test_a_model_without_config_pbtxt_needs_none():
    assert needs_gpu(None) is False


@pytest.fixture
def repo(tmp_path):
    """gpu (KIND_GPU), cpu (KIND_CPU), auto (no config.pbtxt), pipe (an ensemble of gpu then cpu),
    caller (calls gpu by BLS), outer (an ensemble of pipe)."""
    files = {
        **python_model_files("gpu"),
        **python_model_files("cpu"),
        **bls_caller_files("caller", "gpu"),
        "auto/1/model.py": PYTHON_MODEL,
    }
    files["gpu/config.pbtxt"] += GPU_GROUPS
    files["cpu/config.pbtxt"] += "instance_group [ { kind: KIND_CPU count: 2 } ]\n"
    for name, steps in (("pipe", ("gpu", "cpu")), ("outer", ("pipe",))):
        chain = ", ".join(
            f'{{ model_name: "{step}" model_version: -1 input_map {{ key: "INPUT0" value: "IN" }} '
            f'output_map {{ key: "OUTPUT0" value: "OUT" }} }}'
            for step in steps
        )
        files[f"{name}/config.pbtxt"] = (
            f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            f"ensemble_scheduling {{ step [ {chain} ] }}\n"
        )
        files[f"{name}/1/README.txt"] = "an ensemble\n"
    return Repository.load(write_tree(tmp_path / "model_repository", files))


def test_only_kind_gpu_models_get_an_override_with_their_environment(repo):
    overrides = cpu_overrides(
        repo, sorted(repo.models), {"gpu": "/opt/triton-release/envs/gpu", "cpu": "/opt/triton-release/envs/cpu"}
    )
    assert list(overrides) == ["gpu"]
    assert loaded(overrides["gpu"]).parameters[ENV_PARAMETER].string_value == "/opt/triton-release/envs/gpu"
    assert cpu_overrides(repo, ["cpu", "auto", "pipe"]) == {}


def test_the_models_needing_an_overridden_one_wait_for_it(repo):
    assert deferred(repo, sorted(repo.models), ["gpu"]) == {"caller": {"gpu"}, "outer": {"gpu"}, "pipe": {"gpu"}}
    assert deferred(repo, ["cpu", "auto"], ["gpu"]) == {}
    assert deferred(repo, sorted(repo.models), []) == {}


def test_the_start_loads_neither_overridden_models_nor_their_users_and_never_all():
    triton = container.TritonServer(
        "img",
        {"gpu": 1, "pipe": 1, "cpu": 1},
        all_models=True,
        client=object(),
        overrides={"gpu": "{}"},
        deferred={"pipe": {"gpu"}},
    )
    command = triton.command()
    assert [a for a in command if a.startswith("--load-model")] == ["--load-model=cpu"]
    assert "device_requests" not in triton.limits()
    plain = container.TritonServer("img", {"cpu": 1}, all_models=True, client=object())
    assert "--load-model=*" in plain.command()


# -- the gpus setting and the device requests it makes ------------------------------------------


@pytest.mark.parametrize(
    ("given", "value"),
    [
        ("all", "all"),
        ("ALL", "all"),
        ("2", "2"),
        (2, "2"),
        ("0,1", "device=0,1"),
        ("device=3", "device=3"),
        (" 0, 1 ", "device=0,1"),
        ("GPU-8f6d2c1e-1b2a-4c3d-9e8f-0a1b2c3d4e5f", "device=GPU-8f6d2c1e-1b2a-4c3d-9e8f-0a1b2c3d4e5f"),
        (None, None),
        ("", None),
    ],
)
def test_the_gpus_setting(tmp_path, given, value):
    assert resolve({"gpus": given}, cwd=tmp_path).gpus == value


@pytest.mark.parametrize("given", ["-1", "x", "0", "1.5", "0,,1", "0;1", "all,0", True, 1.5, "２"])
def test_a_gpus_value_that_is_not_all_a_count_or_device_ids_is_refused(tmp_path, given):
    with pytest.raises(UsageError) as error:
        resolve({"gpus": given}, cwd=tmp_path)
    assert "gpus=" in str(error.value)


def test_the_gpus_default_is_none_and_gpu_models_test(tmp_path):
    settings = resolve({}, cwd=tmp_path)
    assert settings.gpus is None and settings.gpu_models == "test"
    assert resolve({"gpu_models": "require"}, cwd=tmp_path).gpu_models == "require"
    with pytest.raises(UsageError):
        resolve({"gpu_models": "maybe"}, cwd=tmp_path)


def test_the_action_inputs_gpus_and_gpu_models_are_settings(tmp_path):
    inputs = ActionInputs.from_env({"INPUT_GPUS": "0,1", "INPUT_GPU-MODELS": "require"})
    assert inputs.settings == {"gpus": "0,1", "gpu_models": "require"}
    settings = resolve({}, action_inputs=inputs.settings, cwd=tmp_path)
    assert (settings.gpus, settings.gpu_models) == ("device=0,1", "require")
    action = (ROOT / "action.yml").read_text()
    assert "\n  gpus:\n" in action and "\n  gpu-models:\n" in action


@pytest.mark.parametrize(
    ("gpus", "count", "ids"),
    [("all", -1, []), ("2", 2, []), ("device=0,1", 0, ["0", "1"]), ("device=GPU-abc", 0, ["GPU-abc"])],
)
def test_the_device_request_for_each_gpus_value(gpus, count, ids):
    [request] = container.device_requests(gpus)
    assert request.count == count and request.device_ids == ids and request.capabilities == [["gpu"]]
    assert container.TritonServer("img", {"m": 1}, client=object(), gpus=gpus).limits()["device_requests"] == [request]
    assert container.device_requests(None) == []


@pytest.mark.parametrize("argv", [["--gpus", "x"], ["--gpus", "-1"], ["--gpu-models", "maybe"]])
def test_a_bad_gpus_flag_exits_2_before_any_server_starts(tmp_path, capsys, argv):
    (tmp_path / "model_repository").mkdir()
    code = main(
        ["test", "--image", "nowhere/none:0", "--model-repository", str(tmp_path / "model_repository"), *argv],
        env={"HOME": str(tmp_path)},
    )
    assert code == 2
    assert "gpu" in capsys.readouterr().err.lower()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "load failed for model 'only': version 1 is at UNAVAILABLE state: Internal: RuntimeError: needs CUDA\n\nAt:\n"
            "  /models/only/1/model.py(4): initialize\n;\n",
            "RuntimeError: needs CUDA",
        ),
        (
            "Internal: RuntimeError: needs CUDA\n\nAt:\n  /models/only/1/model.py(4): initialize",
            "RuntimeError: needs CUDA",
        ),
        ("", "no reason given"),
    ],
)
def test_the_server_s_reason_in_one_line(text, reason):
    assert readiness.reason(text) == reason


# -- how the run reads --------------------------------------------------------------------------


def run_with_gpu_models() -> GoldenRun:
    cases = (
        CaseResult("gpu/basic", "gpu/golden/basic.json", True, 1.0, ()),
        CaseResult("cpu/basic", "cpu/golden/basic.json", True, 2.0, ()),
    )
    return GoldenRun(
        "img", ("cpu", "gpu", "only"), cases, (), on_cpu=("gpu",), needs_gpu=(("only", "RuntimeError: needs CUDA"),)
    )


def test_the_console_says_which_models_ran_on_the_cpu_and_which_were_not_tested():
    out = io.StringIO()
    Console(out=out, err=out).golden_run(run_with_gpu_models())
    text = out.getvalue()
    assert "PASS gpu/basic (1.0 ms, tested on CPU)" in text
    assert "PASS cpu/basic (2.0 ms)" in text
    assert "only was not tested: needs a GPU: RuntimeError: needs CUDA" in text
    report = run_with_gpu_models().to_json()
    assert report["tested_on_cpu"] == ["gpu"]
    assert report["not_tested_needs_gpu"] == {"only": "RuntimeError: needs CUDA"}


def test_the_step_summary_says_tested_on_cpu_and_not_tested():
    report = Report("release")
    report.steps["test"] = StepRecord(run_with_gpu_models(), 0.1, True)
    text = summary(report)
    assert "| `gpu/basic` | pass (tested on CPU) |" in text and "| `cpu/basic` | pass |" in text
    assert "**Tested on CPU**" in text and "`only`: **not tested**: needs a GPU: RuntimeError: needs CUDA" in text
    assert "tested on CPU" not in summary(_report_of(NS(cases=(), on_cpu=(), needs_gpu=())))


def _report_of(result) -> Report:
    report = Report("release")
    report.steps["test"] = StepRecord(result, 0.1, True)
    return report
