"""Tensors as golden cases write them: KServe v2 datatypes, flat or nested data, BYTES as
strings or {"b64": ...}, each type's range and special floats. (The case format around them:
models/golden/format.py.)"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field

import numpy as np

DATATYPES = {
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "BF16",
    "FP32",
    "FP64",
    "BYTES",
}
FLOATS = {"FP16": 1e-3, "BF16": 1e-2, "FP32": 1e-5, "FP64": 1e-9}
MAX_DEPTH = 64  # nesting of "data": far beyond any tensor's rank, far below Python's recursion limit
INTEGERS = {
    dt: (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for dt, t in (
        ("UINT8", np.uint8),
        ("UINT16", np.uint16),
        ("UINT32", np.uint32),
        ("UINT64", np.uint64),
        ("INT8", np.int8),
        ("INT16", np.int16),
        ("INT32", np.int32),
        ("INT64", np.int64),
    )
}
FLOAT_MAX = {
    "FP16": float(np.finfo(np.float16).max),
    "BF16": 3.3895313892515355e38,
    "FP32": float(np.finfo(np.float32).max),
    "FP64": float(np.finfo(np.float64).max),
}
SPECIAL_FLOATS = {
    "NaN": math.nan,
    "nan": math.nan,
    "Infinity": math.inf,
    "inf": math.inf,
    "-Infinity": -math.inf,
    "-inf": -math.inf,
}
TENSOR_KEYS = {"name", "datatype", "shape", "data", "parameters"}


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: tuple = field(repr=False)  # flat, row-major; BYTES elements are str, or bytes from {"b64": ...}

    def array(self) -> np.ndarray:
        if self.datatype == "BYTES":
            return np.array(
                [s if isinstance(s, bytes) else s.encode("utf-8") for s in self.data], dtype=np.object_
            ).reshape(self.shape)
        from tritonclient.utils import triton_to_np_dtype

        return np.array(self.data, dtype=triton_to_np_dtype(self.datatype)).reshape(self.shape)


_END = object()


def flatten(data: object) -> list | None:
    """Nested lists as one flat row-major list, without recursion; None when nested deeper
    than MAX_DEPTH."""
    if not isinstance(data, list):
        return [data]
    flat: list = []
    stack = [iter(data)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            if len(stack) >= MAX_DEPTH:
                return None
            stack.append(iter(item))
        else:
            flat.append(item)
    return flat


def bytes_element(value: object) -> str | bytes | None:
    """A BYTES element as written: a string (sent as UTF-8) or {"b64": ...}; None if neither."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, "\ud800" in the JSON: no UTF-8 for it
            return None
        return value
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


def out_of_range(datatype: str, data: list) -> int | None:
    """The index of the first element its datatype cannot hold, or None. A finite number that
    would become infinite in its type cannot be held either."""
    if datatype in INTEGERS:
        low, high = INTEGERS[datatype]
        return next((i for i, v in enumerate(data) if not low <= v <= high), None)
    if datatype in FLOAT_MAX:
        numpy_types: dict[str, type[np.floating]] = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}
        numpy_type = numpy_types.get(datatype)
        for i, v in enumerate(data):
            try:
                value = float(v)
            except OverflowError:  # an integer too large for any float
                return i
            if not math.isfinite(value):
                continue
            if numpy_type is None:  # BF16: beyond its largest value by more than half a unit in the last place
                if abs(value) > FLOAT_MAX[datatype] * (1 + 2**-9):
                    return i
            else:
                with np.errstate(over="ignore"):
                    if np.isinf(numpy_type(value)):
                        return i
    return None


def element_index(flat: int, shape: tuple[int, ...]) -> list[int]:
    """The index of the `flat`-th element (row-major) in a tensor of `shape`."""
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def short(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def kind_of(datatype: str) -> str:
    if datatype == "BOOL":
        return "true or false"
    return 'numbers (or "NaN", "Infinity", "-Infinity")' if datatype in FLOATS else "integers"
