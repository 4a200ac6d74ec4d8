"""Drift without a server: one output of version N against N+1 (near-zero references, NaN,
integers, BYTES, changed shapes), a case's steps and responses, a model's outputs gathered, the
bound, the config that loads both versions, and how the console, the summary and the settings
read. Served: tests/integration/test_drift.py."""

from __future__ import annotations

import io
import json
import math
import textwrap
from dataclasses import replace
from types import SimpleNamespace as NS

import numpy as np
import pytest
from google.protobuf import json_format, text_format

from support.models import bls_caller_files, golden_case, python_config, python_model_files, sequence_case
from triton_release.action.inputs import ActionInputs
from triton_release.action.summary import summary
from triton_release.cli.common import given_settings
from triton_release.cli.main import parser
from triton_release.console import Console
from triton_release.console.golden import show_fraction
from triton_release.errors import Refused, UsageError
from triton_release.history.planned import ChangesResult
from triton_release.models import golden
from triton_release.models.answers import Answer, Reply
from triton_release.models.config.schema import model_config_pb2
from triton_release.models.devices import ENV_PARAMETER
from triton_release.models.drift import (
    CaseDrift,
    DriftMeter,
    ModelDrift,
    OutputDrift,
    compare_case,
    difference,
    drift_config,
    model_drift,
    over,
    previous_version,
    side_by_side,
)
from triton_release.models.inference import Exchange
from triton_release.models.repository import Repository
from triton_release.models.suite import GoldenRun
from triton_release.session import Report, StepRecord
from triton_release.settings import resolve
from triton_release.steps.golden import check_drift

F32 = np.float32


def test_an_output_scaled_by_1_01_drifts_1_percent_beyond_the_default_tolerance():
    old = np.array([[2, 3, 4, 5]], dtype=F32)
    found = difference(old, "FP32", old * F32(1.01), "FP32", 1e-5, 1e-5)
    assert found.max_rel_diff == pytest.approx(0.01, rel=1e-4)
    assert found.max_abs_diff == pytest.approx(0.05, rel=1e-4)
    assert found.beyond_tolerance and found.where.startswith("[0, ")
    same = difference(old, "FP32", old.copy(), "FP32", 1e-5, 1e-5)
    assert (same.max_abs_diff, same.max_rel_diff, same.beyond_tolerance) == (0.0, 0.0, False)
    within = difference(old, "FP32", old * F32(1.000001), "FP32", 1e-5, 1e-5)
    assert not within.beyond_tolerance and 0 < within.max_rel_diff < 1e-5


def test_a_near_zero_reference_counts_relatively_only_when_its_change_leaves_atol():
    old = np.array([0.0, 1e-6, 1.0])
    noise = difference(old, "FP64", np.array([1e-7, 2e-6, 1.0]), "FP64", 1e-5, 1e-5)
    assert noise.max_rel_diff == 0.0 and noise.max_abs_diff == pytest.approx(1e-6) and not noise.beyond_tolerance
    grown = difference(old, "FP64", np.array([5.0, 1e-6, 1.0]), "FP64", 1e-5, 1e-5)
    assert math.isinf(grown.max_rel_diff) and grown.beyond_tolerance and grown.where == "[0]: 0.0 -> 5.0"
    exact = difference(np.array([0.0]), "FP64", np.array([1e-9]), "FP64", 0.0, 0.0)  # atol 0: zero is zero
    assert math.isinf(exact.max_rel_diff)


def test_nan_and_infinities_are_equal_to_themselves_and_infinitely_far_from_anything_else():
    specials = np.array([np.nan, np.inf, -np.inf])
    assert difference(specials, "FP32", specials.copy(), "FP32", 1e-5, 1e-5).max_rel_diff == 0.0
    changed = difference(specials, "FP32", np.array([1.0, np.inf, np.inf]), "FP32", 1e-5, 1e-5)
    assert math.isinf(changed.max_rel_diff) and math.isinf(changed.max_abs_diff) and changed.beyond_tolerance


def test_integers_compare_exactly_bool_and_bytes_have_no_size_and_a_changed_shape_or_type_is_infinite():
    ints = difference(np.array([10, 0], dtype=np.int32), "INT32", np.array([11, 0], dtype=np.int32), "INT32", 1, 1)
    assert ints.max_rel_diff == pytest.approx(0.1) and ints.beyond_tolerance and ints.where == "[0]: 10 -> 11"
    text = difference(
        np.array([b"cat", b"dog"], dtype=object), "BYTES", np.array([b"cat", b"cow"], dtype=object), "BYTES", 0, 0
    )
    assert text.max_abs_diff is None and math.isinf(text.max_rel_diff) and "'dog' -> 'cow'" in text.where
    assert difference(np.array([True]), "BOOL", np.array([True]), "BOOL", 0, 0).max_rel_diff == 0.0
    shape = difference(np.zeros((1, 4), F32), "FP32", np.zeros((1, 5), F32), "FP32", 1e-5, 1e-5)
    assert shape.where == "shape [1, 4] -> [1, 5]" and math.isinf(shape.max_rel_diff) and shape.beyond_tolerance
    assert difference(np.zeros(1, F32), "FP32", np.zeros(1), "FP64", 1e-5, 1e-5).where == "data type FP32 -> FP64"
    assert difference(None, "", np.zeros(1, F32), "FP32", 0, 0).where == "version N did not answer it"


# -- a case: steps, responses, errors -------------------------------------------------------------


def case_of(tmp_path, text: str, model: str = "m") -> golden.GoldenCase:
    path = tmp_path / model / "golden" / "case.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    case, problems = golden.load_case(path, model)
    assert not problems, [str(p) for p in problems]
    return case


def answer(**outputs) -> Answer:
    return Answer({name: (np.asarray(value), dtype, "") for name, (value, dtype) in outputs.items()})


def reply(*answers: Answer, error: str | None = None) -> Reply:
    return Reply(tuple(answers), error)


def test_each_sequence_step_is_compared_and_steps_expecting_an_error_are_skipped(tmp_path):
    case = case_of(tmp_path, sequence_case((1, 1), (-1, "negative"), (2, 3)))
    old = Exchange(
        (reply(answer(OUTPUT0=([1], "INT32"))), reply(error="negative amount"), reply(answer(OUTPUT0=([3], "INT32")))),
        1.0,
    )
    new = Exchange(
        (reply(answer(OUTPUT0=([1], "INT32"))), reply(error="negative amount"), reply(answer(OUTPUT0=([4], "INT32")))),
        1.0,
    )
    found = compare_case(case, old, new)
    [(name, diffs)] = found.outputs
    assert name == "OUTPUT0" and [d.beyond_tolerance for d in diffs] == [False, True]
    assert diffs[1].where == "m/case step 3 [0]: 3 -> 4"
    assert found.skipped == ("m/case step 2: expects an error",)


def test_a_step_one_version_refuses_is_noted_not_compared(tmp_path):
    case = case_of(tmp_path, golden_case())
    old = Exchange((reply(error="CUDA out of memory\ntraceback"),), 1.0)
    new = Exchange((reply(answer(OUTPUT0=([[2, 3, 4, 5]], "FP32"))),), 1.0)
    found = compare_case(case, old, new)
    assert found.outputs == () and found.skipped == ("m/case: version N answered with an error (CUDA out of memory)",)
    gone = compare_case(case, Exchange((), 1.0, failure="timed out"), new)
    assert gone.outputs == () and "no answer from version N (timed out)" in gone.skipped[0]


def test_a_decoupled_model_s_responses_are_compared_in_order_and_a_changed_count_is_infinite(tmp_path):
    out = [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [i]}] for i in (0, 1)]
    case = case_of(
        tmp_path,
        json.dumps({"inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [2]}], "outputs": out}),
    )
    two = Exchange((reply(answer(OUT=([0], "INT32")), answer(OUT=([1], "INT32"))),), 1.0)
    found = compare_case(case, two, two)
    assert [d.max_rel_diff for d in dict(found.outputs)["OUT"]] == [0.0, 0.0]
    three = Exchange((reply(answer(OUT=([0], "INT32")), answer(OUT=([1], "INT32")), answer(OUT=([2], "INT32"))),), 1.0)
    found = compare_case(case, two, three)
    diffs = dict(found.outputs)["OUT"]
    assert [d.max_rel_diff for d in diffs] == [0.0, 0.0, math.inf] and diffs[-1].where == "m/case: 2 -> 3 responses"
    assert found.skipped == ()


# -- a model, the bound, the report ----------------------------------------------------------------


def scaled_model() -> ModelDrift:
    old = np.array([[2, 3, 4, 5]], dtype=F32)
    within = difference(old, "FP32", old, "FP32", 1e-5, 1e-5)
    scaled = difference(old, "FP32", old * F32(1.01), "FP32", 1e-5, 1e-5)
    scaled = replace(scaled, where=f"a/basic {scaled.where}")  # as compare_case names it
    cases = [
        CaseDrift("a/basic", (("OUTPUT0", (scaled,)),)),
        CaseDrift("a/same", (("OUTPUT0", (within,)),)),
        CaseDrift("a/error", (), ("a/error: expects an error",)),
    ]
    return model_drift("a", 2, 1, cases)


def test_a_model_s_drift_is_its_largest_relative_difference_and_max_drift_bounds_it():
    found = scaled_model()
    [output] = found.outputs
    assert (output.name, output.cases, output.cases_beyond_tolerance) == ("OUTPUT0", 2, 1)
    assert found.cases == 2 and found.skipped == ("a/error: expects an error",)
    assert found.max_rel_diff == pytest.approx(0.01, rel=1e-4) and found.beyond_tolerance
    assert over([found], 0.001) == [found] and over([found], 0.02) == []
    new_model = ModelDrift("b", 1, None, note="no version before 1 in the image (a new model): nothing to compare")
    assert over([new_model], 0.0) == [] and new_model.max_rel_diff == 0.0
    report = found.to_json()
    assert (report["from_version"], report["to_version"], report["compared"]) == (1, 2, True)
    assert report["outputs"][0]["worst"].startswith("a/basic [0, ")
    infinite = ModelDrift("c", 2, 1, (OutputDrift("OUT", None, math.inf, 1, 1, "shape [1] -> [2]"),), 1)
    assert json.loads(json.dumps(infinite.to_json()))["max_rel_diff"] == "Infinity"  # valid JSON, no bare Infinity


def test_the_test_step_refuses_a_drift_above_max_drift_after_the_golden_cases_passed():
    run = GoldenRun("img", ("a",), (), (), drift=(scaled_model(),))
    check_drift(run, 0.05)
    with pytest.raises(Refused) as refused:
        check_drift(run, 0.001)
    message = refused.value.message
    assert (
        "Model a drifted beyond max_drift 0.001: version 2 answers its golden inputs up to 1.00% apart from "
        "version 1 (output OUTPUT0: a/basic [0, "
        in message
        and "Nothing is released" in message
    )
    assert refused.value.result is run and run.to_json()["drift"][0]["model"] == "a"


def test_show_fraction():
    assert [show_fraction(v) for v in (0.0, 0.01, 0.000012, math.inf)] == ["0.00%", "1.00%", "0.0012%", "infinite"]


def test_the_previous_version_is_the_highest_below_the_tested_one():
    assert previous_version([1, 2, 5], 5) == 2 and previous_version([3], 3) is None
    assert previous_version([], None) is None


def test_the_models_compared_in_a_release_are_those_with_a_new_version_never_on_a_first_release():
    change = lambda status, added=(): NS(status=status, added_versions=added)  # noqa: E731
    models = {
        "bumped": change("modified"),
        "added_folder": change("modified", (3,)),
        "new": change("added", (1,)),
        "config_only": change("modified"),
        "gone": change("removed"),
    }
    planned = ChangesResult(NS(base="abc", models=models), (NS(model="bumped"),), None, "")
    assert planned.new_versions == ("added_folder", "bumped", "new")
    assert ChangesResult(NS(base=None, models=models), (), None, "").new_versions == ()


# -- the config that serves both versions ---------------------------------------------------------


def parsed(override: str) -> model_config_pb2.ModelConfig:
    return json_format.Parse(override, model_config_pb2.ModelConfig())


def test_the_drift_config_serves_both_versions_with_the_environment_and_the_cpu_groups():
    config = text_format.Parse(
        python_config("m") + "version_policy: { latest { num_versions: 1 } }\n"
        "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]\n",
        model_config_pb2.ModelConfig(),
    )
    on_cpu = parsed(drift_config(config, [2, 1], "/opt/envs/m", on_cpu=True))
    assert list(on_cpu.version_policy.specific.versions) == [1, 2] and not on_cpu.version_policy.HasField("latest")
    assert on_cpu.parameters[ENV_PARAMETER].string_value == "/opt/envs/m"
    assert [(g.kind, g.count, list(g.gpus)) for g in on_cpu.instance_group] == [
        (model_config_pb2.ModelInstanceGroup.KIND_CPU, 2, [])
    ]
    on_gpu = parsed(drift_config(config, [1, 2]))
    assert on_gpu.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert ENV_PARAMETER not in on_gpu.parameters and on_gpu.max_batch_size == 8
    auto = parsed(drift_config(None, [1, 2], "/opt/envs/m"))
    assert auto.backend == "python" and not auto.input and auto.parameters[ENV_PARAMETER].string_value == "/opt/envs/m"
    assert config.version_policy.HasField("latest")  # the model's own config untouched


# -- how it reads ---------------------------------------------------------------------------------


def drift_run() -> GoldenRun:
    new = ModelDrift("b", 1, None, note="no version before 1 in the image (a new model): nothing to compare")
    same = model_drift(
        "c",
        3,
        2,
        [CaseDrift("c/basic", (("OUT", (difference(np.array([1.0]), "FP64", np.array([1.0]), "FP64", 1e-9, 1e-9),)),))],
    )
    return GoldenRun("img", ("a", "b", "c"), (), (), drift=(scaled_model(), new, same))


def test_the_console_gives_one_line_per_model():
    out = io.StringIO()
    Console(out=out, err=out).golden_run(drift_run())
    lines = [line for line in out.getvalue().splitlines() if line.startswith("drift ")]
    assert lines == [
        "drift a 1 -> 2: up to 1.00% (OUTPUT0, max abs diff 0.05) over 2 case(s), BEYOND TOLERANCE in 1; "
        "1 not compared (the report says why)",
        "drift b: not compared: no version before 1 in the image (a new model): nothing to compare",
        "drift c 2 -> 3: up to 0.00% (OUT, max abs diff 0) over 1 case(s), within tolerance",
    ]


def test_the_step_summary_has_a_drift_table_with_changes_beyond_tolerance_in_bold():
    report = Report("release")
    report.steps["test"] = StepRecord(drift_run(), 0.1, True)
    text = summary(report)
    assert "| model | versions | output | max abs diff | max rel diff | beyond tolerance |" in text
    row = next(line for line in text.splitlines() if line.startswith("| `a` |"))
    assert row.startswith("| `a` | 1 -> 2 | `OUTPUT0` | 0.05 | **1.00%** | **yes**: 1 of 2 cases (a/basic \\[0, ")
    assert "| `c` | 2 -> 3 | `OUT` | 0 | 0.00% | no |" in text
    assert "- `b`: not compared: no version before 1 in the image (a new model)" in text
    assert "- `a`: not compared: a/error: expects an error" in text
    refused = Report("release")
    refused.steps["test"] = StepRecord(drift_run(), 0.1, False, 1)  # the drift of a refused test step shows too
    assert "**1.00%**" in summary(refused)
    assert "Drift" not in summary(Report("release"))


# -- the setting, the flag, the input ---------------------------------------------------------------


def test_max_drift_is_a_fraction_or_a_percentage_from_the_file_the_input_or_the_flag(tmp_path):
    assert resolve({}, cwd=tmp_path).max_drift is None
    assert resolve({"max_drift": "0.001"}, cwd=tmp_path).max_drift == 0.001
    assert resolve({"max_drift": "0.1%"}, cwd=tmp_path).max_drift == pytest.approx(0.001)
    (tmp_path / "triton-release.yaml").write_text("max_drift: 0.02\n")
    assert resolve({}, cwd=tmp_path).max_drift == 0.02
    for bad in ("-1", "lots", "nan", True):
        with pytest.raises(UsageError, match="max_drift"):
            resolve({"max_drift": bad}, cwd=tmp_path)
    args = parser().parse_args(["release", "--to", "r", "--max-drift", "0.001"])
    assert given_settings(args)["max_drift"] == "0.001"
    inputs = ActionInputs.from_env({"INPUT_MAX-DRIFT": "0.5%"})
    assert resolve({}, action_inputs=inputs.settings, cwd=tmp_path).max_drift == pytest.approx(0.005)


class Reloading:
    """A server that serves no version N yet: every model to compare is reloaded; `refuse`: those
    whose reload fails, and why."""

    http_url = grpc_url = "unused"

    def __init__(self, refuse: dict[str, str]) -> None:
        self.unloadable, self.overrides, self.apart, self.refuse, self.asked = {}, {}, {}, refuse, []

    def model_ready(self, name, version):
        return False

    def check_running(self, during):
        self.checked = during

    def load_configs(self, loads):
        self.asked.append({name: versions for name, (_, versions) in loads.items()})
        return {name: self.refuse.get(name, "") for name in loads}


def test_a_waves_models_are_reloaded_beside_their_previous_version_together_then_compared_in_order(make_repo):
    names = ["a", "b", "c", "d", "e"]
    files = {path: text for n in names for path, text in python_model_files(n).items()}
    files.update({f"{n}/2/model.py": files[f"{n}/1/model.py"] for n in names})
    repo = Repository.load(make_repo(files))
    server = Reloading({"c": "out of memory"})
    meter = DriftMeter(repo, server, {"a": 1, "b": 1, "c": 1, "d": None, "e": 1}, {n: 2 for n in names})
    meter._compare = lambda name: ModelDrift(name, 2, 1)  # the answers need a server: not here
    failed = NS(case="e/basic", passed=False)
    meter.after_wave(names, [failed])
    assert server.asked == [{"a": [1, 2], "b": [1, 2], "c": [1, 2]}]  # one batch: d is new, e failed
    assert [d.model for d in meter.results] == names
    by = {d.model: d for d in meter.results}
    assert by["c"].note == "version 1 did not load beside 2: out of memory"
    assert "a new model" in by["d"].note and "golden cases failed" in by["e"].note
    assert by["a"].note == "" and by["b"].note == ""
    assert "drift" in server.checked  # a reload failed: the server must still be running


def test_max_drift_for_a_plain_image_is_refused_before_a_server_starts(make_repo, monkeypatch, capsys):
    from triton_release.cli.main import main

    monkeypatch.chdir(make_repo(python_model_files("a")).parent)
    assert main(["test", "--image", "local/anything:1", "--max-drift", "0.01"]) == 2
    assert "only a staged candidate says which versions are new" in capsys.readouterr().err


def test_only_models_whose_previous_version_the_image_alone_would_not_serve_are_paired_from_the_start(make_repo):
    names = ["plain", "pinned", "policy", "step", "ens", "new", "gone"]
    files = {path: text for n in names for path, text in python_model_files(n).items()}
    files.update({f"{n}/2/model.py": files[f"{n}/1/model.py"] for n in names})
    files["pinned/golden/old.json"] = golden_case(version=1)
    files["policy/config.pbtxt"] += "version_policy { all { } }\n"
    files["ens/config.pbtxt"] = textwrap.dedent("""\
        name: "ens"
        platform: "ensemble"
        max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        ensemble_scheduling { step [ { model_name: "step" model_version: -1
          input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }
        """)
    del files["gone/golden/basic.json"]
    repo = Repository.load(make_repo(files))
    previous = {"plain": 1, "pinned": 1, "policy": 1, "step": 1, "new": None, "gone": 1}
    paired = side_by_side(repo, previous, {n: 2 for n in names}, environments={"plain": "/envs/plain"})
    assert list(paired) == ["plain"]  # pins 1; serves 1 already; an ensemble's step; nothing before; no cases
    config = json.loads(paired["plain"])
    assert config["version_policy"] == {"specific": {"versions": ["1", "2"]}}
    assert config["parameters"][ENV_PARAMETER] == {"string_value": "/envs/plain"}
    assert side_by_side(repo, {"plain": 1}, {"plain": 2}, unmeasurable={"plain": "its environment changed"}) == {}


def test_a_pair_is_loaded_with_the_images_config_so_its_written_warm_up_is_kept(make_repo):
    """`warmup: golden` writes model_warmup into the image's config, not the checkout's: the pair's
    load config is made from the image's, as it ships."""
    files = python_model_files("warm")
    files["warm/2/model.py"] = files["warm/1/model.py"]
    repo = Repository.load(make_repo(files))
    shipped = model_config_pb2.ModelConfig()
    shipped.CopyFrom(repo["warm"].config)
    shipped.model_warmup.add(name="golden basic", batch_size=1)
    paired = side_by_side(repo, {"warm": 1}, {"warm": 2}, configs={"warm": shipped})
    assert [w["name"] for w in json.loads(paired["warm"])["model_warmup"]] == ["golden basic"]
    assert "model_warmup" not in json.loads(side_by_side(repo, {"warm": 1}, {"warm": 2})["warm"])


def test_a_model_paired_from_the_start_is_compared_without_a_reload_or_noted_when_its_pair_failed(make_repo):
    files = {path: text for n in ("a", "b") for path, text in python_model_files(n).items()}
    files.update({f"{n}/2/model.py": files[f"{n}/1/model.py"] for n in ("a", "b")})
    repo = Repository.load(make_repo(files))
    server = Reloading({})
    server.model_ready = lambda name, _version: name == "a"  # a: served beside; b: loaded alone
    server.apart = {"b": "No module named 'torch'"}
    meter = DriftMeter(repo, server, {"a": 1, "b": 1}, {"a": 2, "b": 2})
    meter._compare = lambda name: ModelDrift(name, 2, 1)
    meter.after_wave(["a", "b"], [])
    assert server.asked == [{}]  # nothing reloaded
    by = {d.model: d for d in meter.results}
    assert by["a"].note == ""
    assert by["b"].note == "version 1 did not load beside 2: No module named 'torch'" and by["b"].unmeasured


def test_a_caller_the_server_does_not_hold_leaves_its_callee_paired(make_repo):
    files = {**python_model_files("plain"), **bls_caller_files("caller", "plain")}
    files["plain/2/model.py"] = files["plain/1/model.py"]
    repo = Repository.load(make_repo(files))
    assert list(side_by_side(repo, {"plain": 1}, {"plain": 2})) == ["plain"]
    assert side_by_side(repo, {"plain": 1}, {"plain": 2, "caller": 1}) == {}  # served, it would load plain
