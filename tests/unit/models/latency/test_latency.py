"""The latency gate without a server: its statistics, the golden inputs as perf_analyzer's input
data and as model_warmup, finding perf_analyzer, the settings, and what the gate says."""

from __future__ import annotations

import hashlib
import json
import stat
import struct
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from support.models import golden_case, python_config, python_model_files, sequence_case, sequence_config, write_tree
from triton_release import cache
from triton_release.action.summary import _latency_table
from triton_release.errors import InfrastructureError
from triton_release.image.warmup import entries, raw_bytes, with_warmup
from triton_release.models.config.schema import model_config_pb2
from triton_release.models.latency import (
    DEFAULT_ROUNDS,
    ColdStart,
    LatencyOptions,
    LatencyRun,
    ModelLatency,
    Round,
    cold_warnings,
    compare,
    instance_count,
    stats,
)
from triton_release.models.latency import perf_analyzer as pa
from triton_release.models.latency.perf_analyzer import (
    Level,
    PerfAnalyzerMissing,
    find,
    input_data,
    parameter_args,
    parse_csv,
    shape_args,
)
from triton_release.models.repository import Repository
from triton_release.models.workload import workload
from triton_release.settings import resolve
from triton_release.steps.golden import check_latency, perf_analyzer_for

# -- statistics -------------------------------------------------------------------------------------


def test_the_same_rounds_give_the_same_interval_and_identical_versions_a_ratio_of_one():
    before = [2710.0, 2650.0, 2800.0, 2690.0]
    found = stats.ratio(before, list(before))
    assert found.estimate == 1.0 and found.low <= 1.0 <= found.high
    noisy = [2.0, 2.3, 1.9, 2.6, 2.1, 2.2]
    assert stats.ratio(noisy, noisy[::-1]) == stats.ratio(noisy, noisy[::-1])  # seeded: reproducible


def test_a_version_three_times_slower_is_refused_beyond_half_and_passes_beyond_three():
    before = [2.7, 2.6, 2.8, 2.7]
    after = [8.8, 8.7, 9.1, 8.8]
    found = stats.ratio(before, after)
    assert found.estimate == pytest.approx(8.8 / 2.7) and 3.0 < found.low <= found.estimate <= found.high < 3.6
    assert stats.verdict(found, 0.5) == stats.REFUSED
    assert stats.verdict(found, 3.0) == stats.PASS
    assert stats.verdict(found, None) == stats.MEASURED


def test_an_interval_straddling_the_bound_is_inconclusive_never_refused():
    before = [1.0, 1.0, 1.0, 1.0]
    after = [1.05, 1.4, 1.1, 1.35]
    found = stats.ratio(before, after)
    assert found.low < 1.2 < found.high
    assert stats.verdict(found, 0.2) == stats.INCONCLUSIVE
    assert stats.worst([stats.PASS, stats.INCONCLUSIVE]) == stats.INCONCLUSIVE
    assert stats.worst([stats.INCONCLUSIVE, stats.REFUSED]) == stats.REFUSED


def test_the_interval_resamples_pairs_so_noise_shared_by_a_pair_cancels():
    moments = [1.0, 1.6, 0.9, 1.4, 1.1, 1.8]  # the runner's load at each pair's moment
    before = [2.0 * m for m in moments]
    after = [2.2 * m for m in moments]  # 10% slower, whatever the load
    found = stats.ratio(before, after)
    assert found.low >= 1.05 and found.high <= 1.2  # medians of paired resamples keep the pairs together


def test_rounds_alternate_and_pairs_are_needed():
    assert stats.alternating(4) == [("before", "after"), ("after", "before"), ("before", "after"), ("after", "before")]
    with pytest.raises(ValueError, match="pairs"):
        stats.ratio([1.0, 2.0], [1.0])
    one = stats.ratio([2.0], [3.0])
    assert one.low == one.high == one.estimate == 1.5


def level(p50: float, concurrency: int = 1) -> Level:
    return Level(concurrency, 1e6 / p50, p50, p50 * 1.1, p50 * 1.5)


def test_compare_pairs_counted_rounds_per_concurrency_and_leaves_out_warm_ups():
    rounds = [Round(0, 1, (level(9999.0),), 300), Round(0, 2, (level(1.0),), 300)]  # warm-ups: not counted
    for index, (version, p50) in enumerate([(1, 2000), (2, 8000), (2, 8100), (1, 2100), (1, 1900), (2, 7900)], 1):
        rounds.append(Round(index, version, (level(p50), level(p50 * 2, 2)), 300))
    found = compare(rounds, 1, 2, 0.5)
    assert [c.concurrency for c in found] == [1, 2]
    first = found[0]
    assert first.pairs == 3 and first.before.p50_us == 2000 and first.after.p50_us == 8000
    assert first.verdict == "refused" and first.throughput.estimate < 0.3
    model = ModelLatency("a", 2, 1, found, tuple(rounds))
    assert model.verdict == "refused" and model.deciding is first
    data = model.to_json()
    assert [r["round"] for r in data["rounds"]] == [0, 0, 1, 2, 3, 4, 5, 6] and data["rounds"][0]["warmup"] is True
    assert data["comparisons"][0]["p50_ratio"]["ratio"] == 4.0


def test_instance_count_from_the_instance_groups():
    config = text_format.Parse(
        "instance_group [ { count: 2 kind: KIND_CPU }, { kind: KIND_CPU } ]", model_config_pb2.ModelConfig()
    )
    assert instance_count(config) == 3 and instance_count(None) == 1
    assert instance_count(model_config_pb2.ModelConfig()) == 1


def test_a_cold_start_beyond_the_bound_and_the_noise_margin_is_a_warning():
    before, after = ColdStart(1, 1.5, 3.0), ColdStart(2, 2.5, 3.5)
    [warning] = cold_warnings("a", before, after, 0.2)
    assert "version 2's load took 2.50 s, version 1's 1.50 s" in warning and "warning, not a refusal" in warning
    assert cold_warnings("a", before, after, None) == ()  # no bound: reported only
    assert cold_warnings("a", ColdStart(1, 1.5, 3.0), ColdStart(2, 1.6, 3.1), 0.01) == ()  # within the margins


# -- the golden inputs as a workload, perf_analyzer's input data and model_warmup -----------------


def repo_of(tmp_path, files) -> Repository:
    return Repository.load(write_tree(tmp_path / "model_repository", files))


def test_a_batching_models_cases_become_one_sample_per_row_at_the_first_cases_batch_size(tmp_path):
    files = python_model_files("a")
    files["a/golden/basic.json"] = golden_case(
        shape=(2, 4), data=(1, 2, 3, 4, 5, 6, 7, 8), out=(2, 3, 4, 5, 6, 7, 8, 9)
    )
    files["a/golden/single.json"] = golden_case()
    files["a/golden/wrong.json"] = json.dumps({"inputs": json.loads(golden_case())["inputs"], "error": "nope"})
    load = workload(repo_of(tmp_path, files)["a"])
    assert load.usable and load.batch_size == 2 and load.cases == ("a/basic",)
    assert [s.tensors[0][2:] for s in load.samples] == [((4,), (1, 2, 3, 4)), ((4,), (5, 6, 7, 8))]
    assert sorted(load.left_out) == [
        "a/single: batch size 1, the first replayed case's is 2",
        "a/wrong: it expects an error",
    ]
    data = input_data(load)
    assert data == {
        "data": [
            {"INPUT0": {"content": [1.0, 2.0, 3.0, 4.0], "shape": [4]}},
            {"INPUT0": {"content": [5.0, 6.0, 7.0, 8.0], "shape": [4]}},
        ]
    }
    assert "1.0" in json.dumps(data)  # perf_analyzer reads FP32 data only when written as floats
    assert shape_args(load) == ["--shape", "INPUT0:4"]


def test_a_model_that_does_not_batch_is_replayed_whole_with_its_parameters(tmp_path):
    files = {
        "b/config.pbtxt": python_config("b", max_batch_size=0, dims="[ 3 ]", dtype="TYPE_INT32"),
        "b/1/model.py": "",
        "b/golden/one.json": golden_case(
            shape=(3,), data=(1, 2, 3), out=(2, 3, 4), dtype="INT32", parameters={"mode": "fast", "k": 2}
        ),
        "b/golden/other.json": golden_case(shape=(3,), data=(1, 2, 3), out=(2, 3, 4), dtype="INT32"),
    }
    load = workload(repo_of(tmp_path, files)["b"])
    assert load.batch_size is None and load.cases == ("b/one",) and load.samples[0].tensors[0][2] == (3,)
    assert load.left_out == ("b/other: other request parameters than b/one",)
    assert input_data(load)["data"][0]["INPUT0"] == {"content": [1, 2, 3], "shape": [3]}
    assert parameter_args(load) == ["--request-parameter", "k:2:int", "--request-parameter", "mode:fast:string"]


def test_models_whose_golden_inputs_cannot_be_replayed_are_skipped_with_the_reason(tmp_path):
    inputs = json.loads(golden_case())["inputs"]
    files = {
        **python_model_files("errors"),
        "errors/golden/basic.json": json.dumps({"inputs": inputs, "error": "bad input"}),
        "seq/config.pbtxt": sequence_config("seq"),
        "seq/1/model.py": "",
        "seq/golden/case.json": sequence_case((1, 1), (2, 3)),
        **python_model_files("pinned"),
        "pinned/golden/basic.json": golden_case(version=1),
    }
    repo = repo_of(tmp_path, files)
    assert workload(repo["errors"]).skipped == (
        "no golden case sends a request it can replay (errors/basic: it expects an error)"
    )
    assert workload(repo["seq"]).skipped.startswith("a sequence model")
    assert "pins version 1" in workload(repo["pinned"]).skipped


def test_model_warmup_is_written_into_the_images_copy_of_the_config_from_the_golden_inputs(tmp_path):
    files = python_model_files("a")
    files["a/golden/basic.json"] = golden_case(
        shape=(2, 4), data=(1, 2, 3, 4, 5, 6, 7, 8), out=(2, 3, 4, 5, 6, 7, 8, 9)
    )
    files.update({"auto/1/model.py": "", "auto/golden/basic.json": golden_case()})
    repo = repo_of(tmp_path, files)
    user_config = (repo.root / "a" / "config.pbtxt").read_bytes()
    found, warmed = with_warmup(repo, {})
    assert warmed.written == (("a", ("basic",)),)
    assert dict(warmed.left_out) == {"auto": "no config.pbtxt: its batch dimension is for Triton to complete"}
    assert (repo.root / "a" / "config.pbtxt").read_bytes() == user_config  # the user's file is untouched
    config = text_format.Parse(found["a"]["config.pbtxt"].decode(), model_config_pb2.ModelConfig())
    [entry] = config.model_warmup
    assert entry.name == "golden basic" and entry.batch_size == 1
    sent = entry.inputs["INPUT0"]
    assert list(sent.dims) == [4] and sent.data_type == model_config_pb2.TYPE_FP32
    assert found["a"][f"warmup/{sent.input_data_file}"] == np.array([1, 2, 3, 4], dtype="<f4").tobytes()
    # an environment's config copy gets the warm-up appended, its own lines kept
    with_env, _ = with_warmup(
        repo, {"a": {"config.pbtxt": user_config + b'parameters { key: "x" value: { string_value: "y" } }\n'}}
    )
    text = with_env["a"]["config.pbtxt"].decode()
    assert 'string_value: "y"' in text and "model_warmup {" in text


def test_a_config_with_model_warmup_already_is_left_as_it_is(tmp_path):
    files = python_model_files("a")
    files["a/config.pbtxt"] += (
        'model_warmup [ { name: "own" batch_size: 1 inputs { key: "INPUT0" value: '
        "{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]\n"
    )
    assert entries(repo_of(tmp_path, files)["a"]) == "its config.pbtxt has model_warmup already"


def test_warmup_files_hold_raw_little_endian_data_and_length_prefixed_bytes():
    assert raw_bytes("INT32", (2,), (1, 258)) == struct.pack("<ii", 1, 258)
    assert raw_bytes("BYTES", (2,), ("ab", "c")) == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 1) + b"c"
    assert raw_bytes("BOOL", (2,), (True, False)) == b"\x01\x00"


def test_perf_analyzers_csv_gives_one_level_per_concurrency():
    text = (
        "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
        "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"
        "2,404.684,4,129,19,12,4327,330,3,4905,5153,5300,6110\n"
        "1,352.09,4,129,19,12,2327,330,3,2640,2784,2999,5849\n"
    )
    assert parse_csv(text) == [Level(1, 352.09, 2640.0, 2784.0, 5849.0), Level(2, 404.684, 4905.0, 5153.0, 6110.0)]
    assert parse_csv("") == []


# -- finding perf_analyzer ----------------------------------------------------------------------------


def fake(tmp_path, text: str):
    path = tmp_path / "prefix" / "bin" / "perf_analyzer"
    path.parent.mkdir(parents=True)
    path.write_text(f"#!/bin/sh\necho '{text}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "prefix" / "nvidia" / "cuda_runtime" / "lib").mkdir(parents=True)
    (tmp_path / "prefix" / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12").write_bytes(b"")
    return path


def test_perf_analyzer_is_found_on_path_with_the_cuda_runtime_of_its_own_prefix(tmp_path):
    path = fake(tmp_path, "Perf Analyzer Version 2.51.0 (commit unknown)")
    found = find(None, {"PATH": f"{path.parent}:/usr/bin:/bin", "REGISTRY_PASSWORD": "secret"})
    assert found.path == path and found.version == "2.51.0"
    assert found.env["LD_LIBRARY_PATH"] == str(tmp_path / "prefix" / "nvidia" / "cuda_runtime" / "lib")
    assert "REGISTRY_PASSWORD" not in found.env  # it runs with an environment of its own


def test_a_missing_perf_analyzer_or_library_says_how_to_get_it(tmp_path):
    with pytest.raises(PerfAnalyzerMissing, match=r"not on PATH.*pip install --target .* tritonclient==2\.51\.0"):
        find(None, {"PATH": str(tmp_path)})
    with pytest.raises(PerfAnalyzerMissing, match="is not a file"):
        find(str(tmp_path / "nowhere"), {})
    broken = fake(
        tmp_path, "perf_analyzer: error while loading shared libraries: libb64.so.0d: cannot open shared object file"
    )
    with pytest.raises(PerfAnalyzerMissing, match=r"apt-get install libb64-0d"):
        find(str(broken), {"PATH": "/usr/bin:/bin"})


def test_a_missing_perf_analyzer_fails_the_gate_with_exit_3_and_is_a_note_when_only_measuring(tmp_path, fake_install):
    env = {"PATH": str(tmp_path)}
    fake_install(fails="pip download failed (no network)")
    with pytest.raises(InfrastructureError) as refused:
        perf_analyzer_for(LatencyOptions(max_increase=0.2, env=env), ["a"])
    assert refused.value.exit_code == 3 and "--max-latency-increase 0.2 asks for the latency gate" in str(refused.value)
    assert "no network" in str(refused.value) and "apt-get install libb64-0d" in str(refused.value)
    assert not pa.installed_prefix().exists()  # nothing half-installed is left
    analyzer, note = perf_analyzer_for(LatencyOptions(env=env), ["a"])  # only measuring: nothing installed
    assert analyzer is None and note.startswith("latency not measured: perf_analyzer was not found")
    assert "installs it on first use" in note
    analyzer, note = perf_analyzer_for(LatencyOptions(max_increase=0.2, env=env), [])
    assert analyzer is None and "a first release" in note  # nothing to compare: a note, not a failure


# -- installing perf_analyzer on first use (its downloads stand in: tests/integration installs it) ---

FAKE_VERSION = "#!/bin/sh\necho 'Perf Analyzer Version 2.51.0 (commit unknown)'\n"


@pytest.fixture
def fake_install(tmp_path, monkeypatch):
    """The cache in tmp_path, and FILES pinned to small stand-ins that `_fetch` writes (or fails
    with `fails`): `fake_install(fails="")` returns the list of fetches made."""
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    contents = {
        "bin/perf_analyzer": FAKE_VERSION.encode(),
        "lib/libcudart.so.12": b"cudart",
        "lib/libb64.so.0d": b"b64",
    }
    monkeypatch.setattr(
        pa, "FILES", {relative: (relative, hashlib.sha256(data).hexdigest()) for relative, data in contents.items()}
    )
    fetches: list[Path] = []

    def install(fails: str = "") -> list[Path]:
        def fetch(folder: Path) -> None:
            fetches.append(folder)
            if fails:
                raise PerfAnalyzerMissing(f"{fails}. {pa.HOW_TO_GET}")
            for relative, data in contents.items():
                pa._place(folder, relative, data)

        monkeypatch.setattr(pa, "_fetch", fetch)
        return fetches

    monkeypatch.setattr(pa.sys, "platform", "linux")
    monkeypatch.setattr(pa.platform, "machine", lambda: "x86_64")
    yield install
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "elsewhere")})


def test_the_gate_installs_perf_analyzer_on_first_use_into_the_cache_and_uses_it_after(tmp_path, fake_install):
    fetches = fake_install()
    found = find(None, {"PATH": str(tmp_path)}, install_missing=True)
    prefix = pa.installed_prefix()
    assert found.path == prefix / "bin" / "perf_analyzer" and found.version == "2.51.0" and len(fetches) == 1
    assert found.env["LD_LIBRARY_PATH"] == str(prefix / "lib")  # libcudart and libb64 beside it
    assert sorted(p.relative_to(prefix).as_posix() for p in prefix.rglob("*") if p.is_file()) == [
        ".complete",
        "bin/perf_analyzer",
        "lib/libb64.so.0d",
        "lib/libcudart.so.12",
    ]
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})  # the next run: checked again, not fetched
    assert find(None, {"PATH": str(tmp_path)}).path == found.path and len(fetches) == 1


@pytest.mark.parametrize(
    ("forge", "why"),
    [
        (lambda prefix: (prefix / "lib" / "libc.so.6").write_bytes(b"evil"), "holds lib/libc.so.6"),
        (lambda prefix: (prefix / "bin" / "perf_analyzer").write_text(FAKE_VERSION + "curl evil\n"), "other bytes"),
        (lambda prefix: (prefix / "lib" / "libb64.so.0d").unlink(), "lacks lib/libb64.so.0d"),
        (lambda prefix: (prefix / "bin" / "perf_analyzer").chmod(0o644), "not executable"),
        (lambda prefix: (prefix / ".complete").unlink(), "never finished"),
        (lambda prefix: (prefix / "sitecustomize").mkdir(), "holds the folder sitecustomize"),
    ],
)
def test_an_installed_perf_analyzer_someone_else_changed_is_discarded_and_installed_again(
    tmp_path, fake_install, caplog, forge, why
):
    fetches = fake_install()
    find(None, {"PATH": str(tmp_path)}, install_missing=True)
    prefix = pa.installed_prefix()
    forge(prefix)
    assert why in pa.differs(prefix)
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})  # the next run, with the gate
    found = find(None, {"PATH": str(tmp_path)}, install_missing=True)
    assert len(fetches) == 2 and pa.differs(prefix) == "" and found.version == "2.51.0"
    assert f"the cache entry {prefix} " in caplog.text and why in caplog.text and "discarded" in caplog.text


def test_measuring_only_checks_an_install_it_finds_and_installs_none_where_there_is_none(tmp_path, fake_install):
    """docs/latency.md: without a bound, an install found in the cache is checked (and one that
    differs installed again); an unfinished one counts as none, and none is installed."""
    fetches = fake_install()
    find(None, {"PATH": str(tmp_path)}, install_missing=True)
    prefix = pa.installed_prefix()
    (prefix / "bin" / "perf_analyzer").write_text(FAKE_VERSION + "curl evil\n")
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})  # the next run, measuring only
    found = find(None, {"PATH": str(tmp_path)})
    assert len(fetches) == 2 and pa.differs(prefix) == "" and found.version == "2.51.0"
    (prefix / ".complete").unlink()
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    with pytest.raises(PerfAnalyzerMissing, match="not installed in"):
        find(None, {"PATH": str(tmp_path)})
    assert len(fetches) == 2


def test_a_download_that_is_not_the_pinned_file_installs_nothing(tmp_path, fake_install):
    fake_install()
    with pytest.raises(PerfAnalyzerMissing, match="is not the file it was pinned as"):
        pa._place(tmp_path, "lib/libb64.so.0d", b"another library")
    assert not (tmp_path / "lib" / "libb64.so.0d").exists()


def test_libb64_comes_out_of_the_debian_package_as_an_ar_archive():
    def member(name: bytes, data: bytes) -> bytes:
        header = name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"100644".ljust(8)
        return header + str(len(data)).encode().ljust(10) + b"`\n" + data + (b"\n" if len(data) % 2 else b"")

    deb = (
        b"!<arch>\n"
        + member(b"debian-binary", b"2.0\n")
        + member(b"control.tar.xz", b"abc")
        + member(b"data.tar.xz/", b"xyz")
    )
    assert pa._ar_member(deb, "data.tar.xz") == b"xyz" and pa._ar_member(deb, "control.tar.xz") == b"abc"
    with pytest.raises(PerfAnalyzerMissing, match="holds no data.tar.gz"):
        pa._ar_member(deb, "data.tar.gz")
    with pytest.raises(PerfAnalyzerMissing, match="is not a Debian package"):
        pa._ar_member(b"<html>moved</html>", "data.tar.xz")


def test_the_pins_name_the_lock_files_versions():
    lock = pa.LOCK.read_text()
    assert f"tritonclient=={pa.TRITONCLIENT}" in lock and f"nvidia-cuda-runtime-cu12=={pa.CUDA_RUNTIME}" in lock
    assert pa.FILES["bin/perf_analyzer"][0].startswith(f"tritonclient-{pa.TRITONCLIENT}.data/")


# -- settings, and where people look --------------------------------------------------------------------


@pytest.mark.parametrize("given", ["20%", "0.2", 0.2])
def test_max_latency_increase_takes_a_fraction_or_a_percentage(given, tmp_path):
    settings = resolve({"max_latency_increase": given}, cwd=tmp_path)
    assert settings.max_latency_increase == pytest.approx(0.2)
    options = LatencyOptions.from_settings(settings, {"PATH": "/bin"})
    assert (options.max_increase, options.rounds, options.interval_ms, options.perf_analyzer) == (
        pytest.approx(0.2),
        DEFAULT_ROUNDS,
        100,
        None,
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("latency_rounds", 1),
        ("latency_rounds", "many"),
        ("warmup", "hot"),
        ("max_latency_increase", "fast"),
        ("latency_interval", 10),
    ],
)
def test_bad_latency_settings_are_usage_errors(key, value, tmp_path):
    from triton_release.errors import UsageError

    with pytest.raises(UsageError, match=key):
        resolve({key: value}, cwd=tmp_path)


def measured(verdict_bound: float | None) -> LatencyRun:
    rounds = [Round(i, v, (level(p),), 300) for i, (v, p) in enumerate([(1, 2000), (2, 8000), (2, 8200), (1, 2100)], 1)]
    model = ModelLatency(
        "a|b",
        2,
        1,
        compare(rounds, 1, 2, verdict_bound),
        tuple(rounds),
        (ColdStart(1, 1.5, 3.0), ColdStart(2, 1.6, 9.0)),
    )
    return LatencyRun(verdict_bound, 2, 300, None, "", (model, ModelLatency("c", 2, 1, note="no golden cases")))


def test_the_step_summary_has_one_latency_table_with_both_versions_and_the_verdict_in_bold():
    text = "\n".join(_latency_table(measured(0.5)))
    assert "**Latency** (perf_analyzer, at most 2 rounds per version, max-latency-increase 0.5)" in text
    row = next(line for line in text.splitlines() if line.startswith("| `a\\|b`"))
    assert "| 1 -> 2 | 1 | 2.05 -> 8.10 |" in row and "| **3.95x [3.90, 4.00]** | **refused** |" in row
    assert "- `c`: **not gated**, because no golden cases" in text
    assert "cold start: load 1.50 -> 1.60 s, first request 3.0 -> 9.0 ms" in text
    unbounded = "\n".join(_latency_table(measured(None)))
    assert "no bound: reported only" in unbounded and "| 3.95x [3.90, 4.00] | measured |" in unbounded
    assert "- `c`: not measured, because no golden cases" in unbounded  # no bound: nothing is gated


def test_the_refusal_names_the_model_both_versions_figures_and_the_interval_and_so_does_a_shards_record():
    from triton_release.errors import Refused
    from triton_release.fanout.stage import _first_sentence
    from triton_release.models.suite import GoldenRun

    run = GoldenRun("img", ("a|b",), (), (), latency=measured(0.5))
    with pytest.raises(Refused) as refused:
        check_latency(run, 0.5)
    message = " ".join(str(refused.value).split())
    assert message.startswith(
        "Model a|b version 2 is slower than version 1 beyond max_latency_increase 0.5 at "
        "concurrency 1: p50 8.10 ms against 2.05 ms, p99 12.15 ms against 3.08 ms"
    )
    assert "interval 3.90x to 4.00x over 2 rounds each, wholly above 1.50x. Nothing is released." in message
    assert refused.value.exit_code == 1 and refused.value.result is run
    reason = _first_sentence(str(refused.value))  # what a shard's failed record says, and promote repeats
    assert reason.startswith("Model a|b version 2 is slower than version 1") and "p50 8.10 ms against 2.05 ms" in reason
    check_latency(GoldenRun("img", (), (), (), latency=measured(5.0)), 5.0)  # within the bound: no refusal


def test_warmup_off_written_bare_in_yaml_is_off_and_golden_is_golden(tmp_path):
    config = tmp_path / "triton-release.yaml"
    config.write_text("warmup: off\nlatency_rounds: 6\nmax_latency_increase: 20%\n")  # YAML reads bare off as false
    settings = resolve({}, str(config), cwd=tmp_path)
    assert (settings.warmup, settings.latency_rounds, settings.max_latency_increase) == ("off", 6, pytest.approx(0.2))
    assert resolve({"warmup": "golden"}, cwd=tmp_path).warmup == "golden"


@pytest.mark.parametrize(
    "case",
    ['say "hi" \\ there', "two\nlines", "tab\there", "ünïcødé ☃ 模型", "end \\", '"', "} ] model_warmup [ {"],
)
def test_model_warmup_survives_hostile_case_and_input_names_parsed_back_as_written(tmp_path, case):
    config = python_config("a").replace('"INPUT0"', '"IN \\"0\\" \\\\"')  # an input named IN "0" \
    inputs = [{"name": 'IN "0" \\', "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]
    files = {
        "a/config.pbtxt": config,
        "a/1/model.py": "",
        f"a/golden/{case}.json": json.dumps({"inputs": inputs, "outputs": []}),
    }
    repo = repo_of(tmp_path, files)
    found, warmed = with_warmup(repo, {})
    assert warmed.written == (("a", (case,)),)
    parsed = text_format.Parse(found["a"]["config.pbtxt"].decode("utf-8"), model_config_pb2.ModelConfig())
    assert [i.name for i in parsed.input] == ['IN "0" \\']  # the user's own lines kept as they were
    [entry] = parsed.model_warmup
    assert entry.name == f"golden {case}" and entry.batch_size == 1
    assert list(entry.inputs) == ['IN "0" \\']
    sent = entry.inputs['IN "0" \\']
    assert list(sent.dims) == [4] and sent.data_type == model_config_pb2.TYPE_FP32
    assert found["a"][f"warmup/{sent.input_data_file}"] == np.array([1, 2, 3, 4], dtype="<f4").tobytes()
