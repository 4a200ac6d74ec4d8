"""Drift that a float cannot see, and drift that is not drift: integers beyond 2**53 compared
exactly (INT64, UINT64, the extremes of each type), and an output that only the new version
answers reported as new instead of as an infinite difference."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from support.models import case_file, golden_case
from triton_release.console import Console
from triton_release.models.answers import Answer, Reply
from triton_release.models.drift import compare_case, difference, model_drift
from triton_release.models.inference import Exchange
from triton_release.models.suite import GoldenRun

I64, U64 = np.iinfo(np.int64), np.iinfo(np.uint64)


# -- integers: exactly ------------------------------------------------------------------------------


def test_int64_values_one_apart_beyond_2_53_differ():
    found = difference(np.array([2**53 + 1], np.int64), "INT64", np.array([2**53], np.int64), "INT64", 0, 0)
    assert found.beyond_tolerance and found.max_abs_diff == 1.0
    assert found.max_rel_diff == pytest.approx(2.0**-53) and found.max_rel_diff > 0
    assert found.where == f"[0]: {2**53 + 1} -> {2**53}"  # the exact values, not floats rounded alike


@pytest.mark.parametrize(
    ("dtype", "datatype", "old", "new", "size"),
    [
        (np.uint64, "UINT64", U64.max, U64.max - 1, 1),
        (np.int64, "INT64", I64.min, I64.max, 2**64 - 1),  # the difference fits no int64
        (np.int64, "INT64", I64.max, I64.max - 3, 3),
    ],
)
def test_the_extremes_of_64_bit_integers_are_compared_without_rounding_or_overflow(dtype, datatype, old, new, size):
    found = difference(np.array([old], dtype), datatype, np.array([new], dtype), datatype, 0, 0)
    assert found.beyond_tolerance and found.max_abs_diff == float(size)
    assert found.max_rel_diff == pytest.approx(size / abs(int(old))) and found.max_rel_diff > 0
    assert found.where == f"[0]: {int(old)} -> {int(new)}"


def test_equal_integers_do_not_differ_and_a_change_from_zero_is_infinite():
    big = np.array([[2**62, -(2**62), 0]], np.int64)
    same = difference(big, "INT64", big.copy(), "INT64", 0, 0)
    assert (same.max_abs_diff, same.max_rel_diff, same.beyond_tolerance) == (0.0, 0.0, False)
    grown = difference(big, "INT64", np.array([[2**62, -(2**62), 7]], np.int64), "INT64", 0, 0)
    assert math.isinf(grown.max_rel_diff) and grown.where == "[0, 2]: 0 -> 7" and grown.max_abs_diff == 7.0


# -- an added output is new, not drift ----------------------------------------------------------------


def exchange(**outputs) -> Exchange:
    answer = Answer({name: (np.asarray(value, np.float32), "FP32", "") for name, value in outputs.items()})
    return Exchange((Reply((answer,)),), 1.0)


def test_an_output_only_the_new_version_answers_is_new_and_the_shared_ones_are_compared(tmp_path):
    case = case_file(tmp_path, "m", golden_case())
    old = exchange(OUTPUT0=[[2, 3, 4, 5]])
    new = exchange(OUTPUT0=[[2, 3, 4, 5]], EXTRA=[[1, 1, 1, 1]])
    found = compare_case(case, old, new)
    assert [name for name, _ in found.outputs] == ["OUTPUT0"]
    assert found.new_outputs == ("EXTRA",) and found.gone_outputs == ()
    drift = model_drift("m", 2, 1, [found])
    assert drift.max_rel_diff == 0.0 and not drift.beyond_tolerance
    assert drift.new_outputs == ("EXTRA",) and [o.name for o in drift.outputs] == ["OUTPUT0"]
    assert "output 'EXTRA' is new in version 2" in "; ".join(drift.skipped)
    assert drift.to_json()["new_outputs"] == ["EXTRA"] and drift.to_json()["max_rel_diff"] == 0.0
    out = io.StringIO()
    Console(out=out, err=out).drift([drift])
    assert "within tolerance; new outputs in 2: EXTRA (not compared)" in out.getvalue()


def test_an_output_the_new_version_no_longer_answers_is_gone_not_drift(tmp_path):
    case = case_file(tmp_path, "m", golden_case())
    found = compare_case(case, exchange(OUTPUT0=[[2, 3, 4, 5]], OLD=[[0, 0, 0, 0]]), exchange(OUTPUT0=[[2, 3, 4, 5]]))
    drift = model_drift("m", 2, 1, [found])
    assert (
        drift.gone_outputs == ("OLD",) and drift.max_rel_diff == 0.0 and [o.name for o in drift.outputs] == ["OUTPUT0"]
    )


def test_an_output_both_versions_answer_elsewhere_but_one_leaves_out_of_a_case_still_differs(tmp_path):
    first = case_file(tmp_path / "a", "m", golden_case())
    second = case_file(tmp_path / "b", "m", golden_case())
    both = compare_case(
        first,
        exchange(OUTPUT0=[[2, 3, 4, 5]], AUX=[[1, 1, 1, 1]]),
        exchange(OUTPUT0=[[2, 3, 4, 5]], AUX=[[1, 1, 1, 1]]),
    )
    dropped = compare_case(
        second, exchange(OUTPUT0=[[2, 3, 4, 5]]), exchange(OUTPUT0=[[2, 3, 4, 5]], AUX=[[1, 1, 1, 1]])
    )
    drift = model_drift("m", 2, 1, [both, dropped])
    assert drift.new_outputs == () and math.isinf(drift.max_rel_diff)
    aux = next(o for o in drift.outputs if o.name == "AUX")
    assert aux.cases == 2 and aux.cases_beyond_tolerance == 1 and "version N did not answer it" in aux.worst


def test_a_run_with_a_new_output_reads_as_such_on_the_console(tmp_path):
    case = case_file(tmp_path, "m", golden_case())
    drift = model_drift(
        "m",
        2,
        1,
        [compare_case(case, exchange(OUTPUT0=[[2, 3, 4, 5]]), exchange(OUTPUT0=[[2, 3, 4, 5]], EXTRA=[[0, 0, 0, 0]]))],
    )
    out = io.StringIO()
    Console(out=out, err=out).golden_run(GoldenRun("img", ("m",), (), (), drift=(drift,)))
    [line] = [line for line in out.getvalue().splitlines() if line.startswith("drift ")]
    assert line.startswith("drift m 1 -> 2: up to 0.00% (OUTPUT0, max abs diff 0) over 1 case(s), within tolerance")
    assert "infinite" not in line and "BEYOND" not in line


def test_a_stream_that_lost_its_responses_still_differs_infinitely(tmp_path):
    """A decoupled model whose new version sends no response at all: its outputs are not "gone",
    the number of responses changed."""
    text = json.dumps(
        {
            "inputs": [{"name": "COUNT", "datatype": "INT32", "shape": [1], "data": [2]}],
            "outputs": [[{"name": "OUT", "datatype": "INT32", "shape": [1], "data": [i]}] for i in (0, 1)],
        }
    )
    case = case_file(tmp_path, "m", text)
    two = Exchange((Reply(tuple(Answer({"OUT": (np.array([i], np.int32), "INT32", "")}) for i in (0, 1))),), 1.0)
    found = compare_case(case, two, Exchange((Reply(()),), 1.0))
    assert found.gone_outputs == () and math.isinf(dict(found.outputs)["OUT"][0].max_rel_diff)
    assert math.isinf(model_drift("m", 2, 1, [found]).max_rel_diff)
