"""Two tensors of one data type and shape compared element by element: the one kernel behind a
golden case's check (its expected tensor against the answer) and drift (version N's answer
against N+1's). The reference is the expected tensor, or N's answer.

Per element, with the tolerances `atol` and `rtol` (answers.tolerances):
- floats: equal where the values are, NaN against NaN too (so an infinity against the same one).
  The absolute difference is |actual - reference| (infinite against a NaN or another infinity).
  The relative difference is that over |reference|; where |reference| is within atol of zero a
  ratio says nothing, so it is 0 when the difference is within atol, else infinite (a value
  that was zero no longer is). Beyond tolerance where |actual - reference| > atol + rtol *
  |reference| (an infinite reference counting as atol alone).
- integers: exactly, as integers (never through floats, where 2**53 + 1 equals 2**53): any
  difference is beyond tolerance, its relative difference |actual - reference| / |reference|
  (infinite from 0).
- BOOL and BYTES: equal or not; a difference has no size (no absolute difference, an infinite
  relative one).

`max_rel_diff` is the largest relative difference over all elements, the one measure the golden
report and drift both give.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from triton_release.models.tensors import INTEGERS, element_index

INFINITE = math.inf


@dataclass(frozen=True)
class Element:
    """One element named: its index ("[0, 3]"), both values shown, and its differences."""

    index: str
    reference: str
    actual: str
    abs_diff: float | None
    rel_diff: float


@dataclass(frozen=True)
class Elements:
    """What comparing every element found."""

    size: int
    beyond: int  # how many elements are beyond tolerance
    max_abs_diff: float | None  # None: the type has no size (BOOL, BYTES)
    max_rel_diff: float
    worst: Element | None  # the largest relative difference (then absolute); None: all equal
    worst_beyond: Element | None  # the same among the elements beyond tolerance; None: none is

    @property
    def within(self) -> bool:
        return not self.beyond


def compare_elements(reference: np.ndarray, actual: np.ndarray, datatype: str, atol: float, rtol: float) -> Elements:
    """`reference` and `actual` have the same shape; `datatype` is their Triton data type."""
    shape = tuple(reference.shape)
    ref, act = np.asarray(reference).reshape(-1), np.asarray(actual).reshape(-1)
    if datatype in INTEGERS:
        return _integers(ref, act, shape)
    if datatype == "BYTES":
        return _unsized(ref, act, shape, lambda x, y: _as_bytes(x) == _as_bytes(y))
    if datatype == "BOOL":
        return _unsized(ref, act, shape, lambda x, y: bool(x) == bool(y))
    return _floats(ref, act, shape, atol, rtol)


def _floats(ref: np.ndarray, act: np.ndarray, shape: tuple[int, ...], atol: float, rtol: float) -> Elements:
    r, a = ref.astype(np.float64), act.astype(np.float64)
    equal = (r == a) | (np.isnan(r) & np.isnan(a))
    with np.errstate(invalid="ignore", over="ignore"):
        abs_diff = np.where(equal, 0.0, np.nan_to_num(np.abs(a - r), nan=INFINITE, posinf=INFINITE))
        magnitude = np.abs(r)
        near_zero = magnitude <= atol
        ratio = abs_diff / np.where(near_zero, 1.0, magnitude)
        rel_diff = np.where(abs_diff == 0, 0.0, np.where(near_zero, np.where(abs_diff <= atol, 0.0, INFINITE), ratio))
        rel_diff = np.nan_to_num(rel_diff, nan=INFINITE, posinf=INFINITE)  # an infinite reference that changed
        beyond = abs_diff > atol + rtol * np.nan_to_num(magnitude, posinf=0.0)
    if not r.size:
        return Elements(0, 0, 0.0, 0.0, None, None)

    def named(i: int) -> Element:
        return Element(_index(i, shape), _shown(ref[i]), _shown(act[i]), float(abs_diff[i]), float(rel_diff[i]))

    # ascending by relative, then absolute difference, then the first element of equals last
    order = np.lexsort((-np.arange(r.size), abs_diff, rel_diff))
    worst = int(order[-1])
    beyond_order = order[beyond[order]]
    return Elements(
        int(r.size),
        int(beyond.sum()),
        float(abs_diff.max()),
        float(rel_diff.max()),
        named(worst) if abs_diff[worst] else None,
        named(int(beyond_order[-1])) if beyond_order.size else None,
    )


def _integers(ref: np.ndarray, act: np.ndarray, shape: tuple[int, ...]) -> Elements:
    """As Python integers, which neither round (INT64 and UINT64 beyond 2**53 do as floats) nor
    overflow (|INT64 max - INT64 min| fits no int64)."""
    differ = (
        np.flatnonzero(ref != act)
        if ref.dtype == act.dtype
        else np.array([i for i, (x, y) in enumerate(zip(ref.tolist(), act.tolist())) if x != y], dtype=np.intp)
    )
    if not differ.size:
        return Elements(int(ref.size), 0, 0.0, 0.0, None, None)
    olds, news = ref[differ].tolist(), act[differ].tolist()
    sizes = [abs(y - x) for x, y in zip(olds, news)]
    relative = [size / abs(x) if x else INFINITE for x, size in zip(olds, sizes)]  # int / int: rounded once
    k = max(range(len(sizes)), key=lambda j: (relative[j], sizes[j]))
    worst = Element(_index(int(differ[k]), shape), str(olds[k]), str(news[k]), float(sizes[k]), relative[k])
    return Elements(int(ref.size), int(differ.size), float(max(sizes)), relative[k], worst, worst)


def _unsized(
    ref: np.ndarray, act: np.ndarray, shape: tuple[int, ...], same: Callable[[object, object], bool]
) -> Elements:
    """BOOL and BYTES: the first element that differs is the worst (every difference is infinite)."""
    differ = [i for i, (x, y) in enumerate(zip(ref, act)) if not same(x, y)]
    if not differ:
        return Elements(int(ref.size), 0, None, 0.0, None, None)
    i = differ[0]
    worst = Element(_index(i, shape), _shown(ref[i]), _shown(act[i]), None, INFINITE)
    return Elements(int(ref.size), len(differ), None, INFINITE, worst, worst)


def json_figure(value: float | None) -> float | str | None:
    """A difference in the JSON report: an infinite one as "Infinity" (JSON has no infinity)."""
    if value is None or math.isfinite(value):
        return value
    return "Infinity" if value > 0 else "NaN"


def _index(flat: int, shape: tuple[int, ...]) -> str:
    return str(element_index(flat, shape))


def _as_bytes(value: object) -> bytes:
    """A BYTES element as bytes: an answer can hold it as text."""
    return value if isinstance(value, bytes) else str(value).encode()


def _shown(value: object) -> str:
    """An element in a message: BYTES as text where it is UTF-8, else as Python bytes; a number as
    its own type prints it (np.float32(5.05) as 5.05)."""
    if isinstance(value, bytes):
        try:
            return repr(value.decode("utf-8"))
        except UnicodeDecodeError:
            return repr(value)
    if isinstance(value, np.bool_ | bool):
        return str(bool(value))
    return str(value) if isinstance(value, np.generic) else repr(value)
