"""perf_analyzer sends every request of a run with one shape: a model's workload is its cases of
the first replayable case's input shape, the others left out with the reason, so a model whose
cases differ in shape (the bundled BYTES example's 4 and 5 strings) is measured, not skipped."""

from __future__ import annotations

from support.models import golden_case, python_model_files, write_tree
from support.stack import ROOT
from triton_release.models.latency.perf_analyzer import input_data, shape_args
from triton_release.models.repository import Repository
from triton_release.models.workload import workload


def test_the_bundled_bytes_model_is_driven_with_its_first_cases_shape_only():
    repo = Repository.load(ROOT / "model_repository")
    load = workload(repo["text_upper"])
    assert load.usable and load.cases == ("text_upper/ascii",) and load.batch_size is None
    assert load.left_out == (
        "text_upper/unicode: inputs TEXT [5], the first replayed case's are TEXT [4] (perf_analyzer sends one "
        "shape a run)",
    )
    assert [entry["TEXT"]["shape"] for entry in input_data(load)["data"]] == [[4]]
    assert shape_args(load) == ["--shape", "TEXT:4"]
    for name in repo.models:  # every bundled example is driven
        assert workload(repo[name]).usable, name


def test_a_batching_model_with_a_variable_dimension_is_driven_at_the_first_cases_length(tmp_path):
    files = python_model_files("v", dims="[ -1 ]")
    files["v/golden/basic.json"] = golden_case(shape=(1, 3), data=(1, 2, 3), out=(2, 3, 4))
    files["v/golden/longer.json"] = golden_case(shape=(1, 5), data=(1, 2, 3, 4, 5), out=(2, 3, 4, 5, 6))
    files["v/golden/same.json"] = golden_case(shape=(1, 3), data=(4, 5, 6), out=(5, 6, 7))
    load = workload(Repository.load(write_tree(tmp_path / "model_repository", files))["v"])
    assert load.cases == ("v/basic", "v/same") and load.batch_size == 1
    assert {s.tensors[0][2] for s in load.samples} == {(3,)}
    assert load.left_out == (
        "v/longer: inputs INPUT0 [5], the first replayed case's are INPUT0 [3] (perf_analyzer sends one shape a run)",
    )
