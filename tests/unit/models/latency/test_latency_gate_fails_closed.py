"""The latency gate fails closed, without a server: a new version that crashes, hangs or errors under
perf_analyzer's load is a regression (refused with a bound, a warning without); a model the gate
leaves out is listed as not gated, and `latency_unmeasured: refuse` refuses it. perf_analyzer is a
small script here that answers as the real one does (its texts as seen on the stack)."""

from __future__ import annotations

import io
import json
import stat
import sys

import pytest

from support.models import python_model_files, write_tree
from triton_release.action.inputs import ActionInputs
from triton_release.action.summary import _latency_table
from triton_release.cli.main import parser
from triton_release.console import Console
from triton_release.errors import Refused, UsageError
from triton_release.models.latency import LatencyMeter, LatencyOptions, LatencyRun, ModelLatency, UnderLoad
from triton_release.models.latency import perf_analyzer as pa
from triton_release.models.latency.perf_analyzer import MeasurementFailed, PerfAnalyzer
from triton_release.models.repository import Repository
from triton_release.models.suite import GoldenRun
from triton_release.models.workload import workload
from triton_release.settings import resolve
from triton_release.steps.golden import check_latency

FAKE = """\
import json, os, sys, time
args = sys.argv[1:]
version, out = args[args.index("-x") + 1], args[args.index("-f") + 1]
what = json.loads(os.environ["FAKE_PERF_ANALYZER"]).get(version, "ok")
if what == "ok":
    with open(out, "w") as f:
        f.write("Concurrency,Inferences/Second,p50 latency,p90 latency,p99 latency\\n1,500,2000,2100,2500\\n")
elif what == "crash":
    print("Request concurrency: 1")
    print("Thread [0] had error: Stub process 'a_0' is not healthy.", file=sys.stderr)
    sys.exit(3)
elif what == "error":
    print("Thread [0] had error: Failed to process the request(s) for model 'a_0', message: RuntimeError: boom",
          file=sys.stderr)
    sys.exit(99)
elif what == "hang":
    time.sleep(60)
elif what == "refuse":
    print("error: Failed to init manager inputs: unable to find float data in json", file=sys.stderr)
    sys.exit(99)
"""
LOG = """\
I1202 05:38:36.649121 1 grpc_server.cc:2558] "Started GRPCInferenceService at 0.0.0.0:8001"
E1202 05:38:37.913893 1 pb_stub.cc:714] "Failed to process the request(s) for model 'a_0', message: boom"
I1202 05:38:38.000000 1 model_lifecycle.cc:838] "successfully loaded 'other'"
"""


class FakeServer:
    http_url = grpc_url = "127.0.0.1:1"
    overrides: dict = {}
    completed: dict = {}

    def model_ready(self, name, version) -> bool:
        return True

    def check_running(self, during) -> None:
        pass

    def load_config(self, name, config, versions) -> str:
        return ""

    def logs(self) -> str:
        return LOG


def meter(tmp_path, behaviour: dict[str, str], **options) -> LatencyMeter:
    files = python_model_files("a")
    files["a/2/model.py"] = files["a/1/model.py"]
    repo = Repository.load(write_tree(tmp_path / "model_repository", files))
    script = tmp_path / "perf_analyzer"
    script.write_text(f"#!{sys.executable}\n{FAKE}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    analyzer = PerfAnalyzer(script, "2.51.0", {"PATH": "/usr/bin:/bin", "FAKE_PERF_ANALYZER": json.dumps(behaviour)})
    latency = LatencyOptions(max_increase=0.5, rounds=2, interval_ms=50, **options)
    return LatencyMeter(repo, FakeServer(), {"a": 1}, {"a": 2}, latency, analyzer)


def measured(tmp_path, behaviour: dict[str, str]) -> ModelLatency:
    with meter(tmp_path, behaviour) as timing:
        timing.after_wave(["a"], [])
        [found] = timing.results
    return found


def run_of(model: ModelLatency, bound: float | None = 0.5, unmeasured: str = "allow") -> GoldenRun:
    return GoldenRun("img", (model.model,), (), (), latency=LatencyRun(bound, 2, 50, None, "", (model,), unmeasured))


def shown(run: GoldenRun) -> str:
    out = io.StringIO()
    Console(out=out, err=out).golden_run(run)
    return out.getvalue()


# -- what perf_analyzer says -------------------------------------------------------------------------


def test_perf_analyzers_words_tell_a_crash_an_error_and_its_own_failure_apart():
    assert pa.under_load("Thread [0] had error: Stub process 'a_0' is not healthy.") == pa.CRASHED
    assert pa.under_load("Thread [0] had error: Failed to process the request(s) for model 'a_0'") == pa.ERRORED
    assert pa.under_load("error: Failed to init manager inputs: unable to find float data in json") == ""


def test_a_round_is_bounded_in_proportion_to_its_windows_not_at_91_s():
    assert pa.run_timeout(1, 300, 0.002) == pytest.approx(16.6)  # the default window, a fast model
    assert pa.run_timeout(1, 150, 0.0) < 15 and pa.run_timeout(2, 300, 0.0) == pytest.approx(23.2)
    assert pa.run_timeout(1, 300, 4.0) == pytest.approx(25.6)  # a model whose golden request takes 4 s


def test_a_hung_round_ends_at_its_timeout_as_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(pa, "run_timeout", lambda *_: 0.5)
    timing = meter(tmp_path, {"1": "hang"})
    load = workload(timing.repo["a"])
    data = pa.write_input_data(load, tmp_path / "a.json")
    with pytest.raises(MeasurementFailed) as failed:
        pa.measure(timing.analyzer, "a", 1, "127.0.0.1:1", data, load, (1,), 50, tmp_path / "out.csv")
    assert failed.value.under_load == pa.HUNG and "did not finish within 0.5 s" in str(failed.value)
    timing.close()


# -- the verdict -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("behaviour", "what"), [("crash", "crashed"), ("error", "errored"), ("hang", "hung")])
def test_a_new_version_that_crashes_hangs_or_errors_under_load_fails_and_is_refused_with_a_bound(
    tmp_path, monkeypatch, behaviour, what
):
    monkeypatch.setattr(pa, "run_timeout", lambda *_: 1.0)
    found = measured(tmp_path, {"2": behaviour})
    assert found.verdict == "failed" and found.failed and not found.measured
    assert found.under_load is not None and (found.under_load.version, found.under_load.what) == (2, what)
    assert found.under_load.server_lines == (LOG.splitlines()[1],)  # the lines naming the model, no others
    assert found.cold_start == ()  # a version that failed under load is not loaded again to time it
    data = run_of(found).latency.to_json()
    assert data["models"][0]["verdict"] == "failed" and data["models"][0]["under_load"]["what"] == what

    with pytest.raises(Refused) as refused:
        check_latency(run_of(found), 0.5)
    message = " ".join(str(refused.value).split())
    assert message.startswith(f"Model a version 2 {what} under the latency gate's load")
    assert "Nothing is released" in message and refused.value.exit_code == 1
    assert refused.value.details == [f"server: {LOG.splitlines()[1]}"]


def test_without_a_bound_a_failure_under_load_is_a_loud_warning_never_a_quiet_skip(tmp_path):
    found = measured(tmp_path, {"2": "crash"})
    text = shown(run_of(found, bound=None))
    assert "warning: latency a 1 -> 2: FAILED: version 2 crashed under the gate's load" in text, text
    assert "not refused: no max_latency_increase" in text and "skipped" not in text
    summary = "\n".join(_latency_table(run_of(found, bound=None).latency))
    assert "**`a` 1 -> 2: failed**: version 2 crashed under the gate's load" in summary, summary


def test_a_version_before_that_fails_under_load_leaves_the_model_not_gated_when_the_new_one_holds(tmp_path):
    found = measured(tmp_path, {"1": "crash"})
    assert found.verdict == "not gated" and not found.failed
    assert found.note.startswith("version 1 crashed under the gate's load")
    assert found.note.endswith("and version 2 held that load: nothing to compare it with")
    both = measured(tmp_path / "both", {"1": "crash", "2": "error"})
    assert both.verdict == "failed" and both.under_load is not None and both.under_load.version == 2


def test_perf_analyzer_failing_on_its_own_is_not_gated_and_listed(tmp_path):
    found = measured(tmp_path, {"1": "refuse", "2": "refuse"})
    assert found.verdict == "not gated" and found.under_load is None
    assert found.note == (
        "perf_analyzer could not drive version 1: error: Failed to init manager inputs: unable to find float data in json"
    )
    check_latency(run_of(found), 0.5)  # listed, not refused: latency_unmeasured is allow
    text = shown(run_of(found))
    assert "warning: latency a: not gated, because perf_analyzer could not drive version 1" in text, text


def test_models_left_out_are_listed_as_not_gated_and_refused_with_latency_unmeasured_refuse():
    sequence = ModelLatency("s", 2, 1, note="a sequence model: its cases' steps need their correlation id")
    new = ModelLatency("n", 1, None, note="no version before 1 in the image (a new model): nothing to compare")
    allowed = GoldenRun("img", ("s", "n"), (), (), latency=LatencyRun(0.5, 2, 50, None, "", (sequence, new)))
    check_latency(allowed, 0.5)
    assert allowed.latency is not None
    data = allowed.latency.to_json()
    assert data["not_gated"] == [{"model": "s", "because": sequence.note}] and data["latency_unmeasured"] == "allow"
    assert [m["verdict"] for m in data["models"]] == ["not gated", "new"]
    assert "warning: latency s: not gated, because a sequence model" in shown(allowed)
    summary = "\n".join(_latency_table(allowed.latency))
    assert "- `s`: **not gated**, because a sequence model" in summary, summary

    total = GoldenRun("img", ("s", "n"), (), (), latency=LatencyRun(0.5, 2, 50, None, "", (sequence, new), "refuse"))
    with pytest.raises(Refused) as refused:
        check_latency(total, 0.5)
    message = " ".join(str(refused.value).split())
    assert "1 model(s) with a new version were not gated" in message and "s: a sequence model" in message
    assert "n:" not in message  # a new model has nothing to compare: never a refusal
    assert "latency_unmeasured: allow" in message and refused.value.exit_code == 1
    assert "REFUSED" in shown(total)


# -- settings and flags ------------------------------------------------------------------------------


def test_latency_unmeasured_is_a_setting_a_flag_and_an_action_input(tmp_path):
    assert LatencyOptions.from_settings(resolve({}, cwd=tmp_path), {}).unmeasured == "allow"
    given = resolve({"latency_unmeasured": "refuse"}, cwd=tmp_path)
    assert LatencyOptions.from_settings(given, {}).unmeasured == "refuse"
    with pytest.raises(UsageError, match="latency_unmeasured"):
        resolve({"latency_unmeasured": "sometimes"}, cwd=tmp_path)
    args = parser().parse_args(["release", "--latency-unmeasured", "refuse"])
    assert getattr(args, "setting.latency_unmeasured") == "refuse"
    inputs = ActionInputs.from_env({"INPUT_LATENCY-UNMEASURED": "refuse", "INPUT_MAX-LATENCY-INCREASE": ""})
    assert inputs.settings == {"latency_unmeasured": "refuse"}  # the action's empty bound stays unset


def test_an_under_load_failure_is_shown_with_its_version_and_error():
    failure = UnderLoad(2, "hung", "no answer", ("x",))
    assert failure.shown() == "version 2 hung under the gate's load (no answer)"
    assert failure.to_json() == {"version": 2, "what": "hung", "error": "no answer", "server_lines": ["x"]}
