"""Comparing one output with its expected tensor, without a server."""

from __future__ import annotations

import math

import numpy as np

from triton_release.models.answers import compare
from triton_release.models.tensors import Tensor


def test_integers_compare_exactly_even_beyond_float_precision():
    expected = Tensor("OUT", "INT64", (1, 1), (9007199254740993,))
    assert compare(expected, np.array([[9007199254740993]], dtype=np.int64), "INT64", 0, 0).passed
    result = compare(expected, np.array([[9007199254740992]], dtype=np.int64), "INT64", 0, 0)
    assert not result.passed and "expected 9007199254740993, got 9007199254740992" in result.message


def test_nan_matches_only_nan_and_infinity_matches_itself():
    expected = Tensor("OUT", "FP32", (1, 3), (math.nan, math.inf, 1.0))
    assert compare(expected, np.array([[np.nan, np.inf, 1.0]], dtype=np.float32), "FP32", 1e-5, 1e-5).passed
    result = compare(expected, np.array([[0.0, np.inf, 1.0]], dtype=np.float32), "FP32", 1e-5, 1e-5)
    assert not result.passed and "worst at [0, 0]" in result.message


def test_bool_compares_exactly():
    expected = Tensor("OUT", "BOOL", (2,), (True, False))
    assert compare(expected, np.array([True, False]), "BOOL", 0, 0).passed
    assert not compare(expected, np.array([True, True]), "BOOL", 0, 0).passed
