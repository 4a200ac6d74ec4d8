"""One comparison kernel: a golden case's check and drift measure an output the same way."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from triton_release.models.answers import compare
from triton_release.models.drift import difference
from triton_release.models.elements import compare_elements
from triton_release.models.golden import Tensor

CASES = [
    ("FP32", [0.0, 1.0, 100.0], [1e-6, 1.0, 100.5]),  # a zero that moved within atol, one beyond rtol
    ("FP32", [0.0, 2.0], [0.5, 2.0]),  # a zero that is no longer one
    ("FP64", [math.nan, math.inf, 3.0], [math.nan, math.inf, 3.0]),
    ("INT64", [10, 0, 9007199254740993], [11, 0, 9007199254740992]),
    ("INT32", [5, 6], [5, 6]),
    ("BOOL", [True, False], [True, True]),
    ("BYTES", [b"dog", b"cat"], [b"dog", b"cow"]),
]


@pytest.mark.parametrize(("datatype", "reference", "actual"), CASES)
def test_golden_and_drift_give_one_max_rel_diff_and_one_verdict(datatype, reference, actual):
    dtype = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32, "BOOL": bool}.get(
        datatype, object
    )
    old, new = np.array(reference, dtype=dtype), np.array(actual, dtype=dtype)
    atol, rtol = (1e-5, 1e-5) if datatype.startswith("FP") else (0.0, 0.0)
    golden = compare(Tensor("OUT", datatype, old.shape, tuple(reference)), new, datatype, atol, rtol)
    drift = difference(old, datatype, new, datatype, atol, rtol)
    assert golden.passed is not drift.beyond_tolerance
    assert golden.max_rel_diff == drift.max_rel_diff
    assert golden.max_abs_diff == drift.max_abs_diff


def test_a_zero_answered_within_atol_has_no_relative_difference():
    found = compare_elements(np.array([0.0, 1.0]), np.array([1e-6, 1.0]), "FP32", 1e-5, 1e-5)
    assert found.within and found.max_rel_diff == 0.0 and found.max_abs_diff == pytest.approx(1e-6)


def test_the_worst_element_beyond_tolerance_is_named_not_the_worst_within():
    # 2e-5 -> 2.8e-5 is within atol yet relatively large (0.4); 100 -> 100.5 is beyond (0.005)
    found = compare_elements(np.array([2e-5, 100.0]), np.array([2.8e-5, 100.5]), "FP64", 1e-5, 1e-5)
    assert found.beyond == 1 and found.worst_beyond is not None and found.worst_beyond.index == "[1]"
    assert found.worst is not None and found.worst.index == "[0]"


def test_an_integer_answer_names_its_worst_element_and_its_sizes():
    result = compare(Tensor("OUT", "INT64", (3,), (10, 100, 7)), np.array([11, 100, 0]), "INT64", 0, 0)
    assert not result.passed and result.max_abs_diff == 7.0 and result.max_rel_diff == 1.0
    assert "2 of 3 element(s) differ; worst at [2]: expected 7, got 0" in result.message


def test_equal_elements_name_no_worst_one():
    found = compare_elements(np.array([b"a"], dtype=object), np.array(["a"], dtype=object), "BYTES", 0, 0)
    assert found.within and found.worst is None and found.max_abs_diff is None


def test_an_infinite_difference_is_valid_json_in_the_report():
    result = compare(Tensor("OUT", "FP32", (1,), (0.0,)), np.array([5.0], dtype=np.float32), "FP32", 1e-5, 1e-5)
    assert math.isinf(result.max_rel_diff)
    assert json.loads(json.dumps(result.to_json(), allow_nan=False))["max_rel_diff"] == "Infinity"
