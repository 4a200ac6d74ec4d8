"""Golden cases: the file format, loading with every problem located, checks against the
model's config, and the comparison of an answer with the expected tensors."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triton_release.models.repository import Model, datatype_name
from triton_release.problems import Problem, line_of

DATATYPES = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "BF16", "FP32", "FP64", "BYTES"}
FLOATS = {"FP16": 1e-3, "BF16": 1e-2, "FP32": 1e-5, "FP64": 1e-9}
CASE_KEYS = {"inputs", "outputs", "atol", "rtol", "version", "protocol", "parameters", "description"}
SPECIAL_FLOATS = {"NaN": math.nan, "nan": math.nan, "Infinity": math.inf, "inf": math.inf,
                  "-Infinity": -math.inf, "-inf": -math.inf}
TENSOR_KEYS = {"name", "datatype", "shape", "data", "parameters"}


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: tuple = field(repr=False)  # flat, row-major

    def array(self) -> np.ndarray:
        if self.datatype == "BYTES":
            return np.array([s.encode("utf-8") for s in self.data], dtype=np.object_).reshape(self.shape)
        from tritonclient.utils import triton_to_np_dtype
        return np.array(self.data, dtype=triton_to_np_dtype(self.datatype)).reshape(self.shape)


@dataclass(frozen=True)
class GoldenCase:
    path: Path
    model: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    responses: tuple[tuple[Tensor, ...], ...] | None = None  # decoupled: expected responses in order
    atol: float | None = None
    rtol: float | None = None
    version: int | None = None
    protocol: str = "http"
    parameters: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def expected(self) -> tuple[Tensor, ...]:
        """Every expected output tensor, over all responses of a decoupled case."""
        if self.responses is not None:
            return tuple(t for response in self.responses for t in response)
        return self.outputs


def _flatten(data) -> list:
    if isinstance(data, list):
        flat = []
        for item in data:
            flat.extend(_flatten(item))
        return flat
    return [data]


class _CaseReader:
    """Reads one golden file, collecting every problem with the line it is on."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text
        self.problems: list[Problem] = []

    def problem(self, message: str, near: str | None = None) -> None:
        line = line_of(self.text, json.dumps(near)) if near is not None else None
        self.problems.append(Problem(self.path, message, line))

    def tensor(self, raw, where: str) -> Tensor | None:
        if not isinstance(raw, dict):
            self.problem(f"{where} must be an object with name, datatype, shape and data")
            return None
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            self.problem(f"{where} has no \"name\"")
            return None
        for key in sorted(set(raw) - TENSOR_KEYS):
            self.problem(f"{where} {name!r}: unknown key {key!r} (expected {', '.join(sorted(TENSOR_KEYS))})", key)
        datatype = raw.get("datatype")
        if datatype not in DATATYPES:
            self.problem(f"{where} {name!r}: datatype {datatype!r} is not a KServe v2 type "
                         f"({', '.join(sorted(DATATYPES))})", name)
            return None
        shape = raw.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            self.problem(f"{where} {name!r}: \"shape\" must be a list of non-negative integers", name)
            return None
        if "data" not in raw:
            self.problem(f"{where} {name!r}: no \"data\"", name)
            return None
        data = _flatten(raw["data"])
        count = math.prod(shape)
        if len(data) != count:
            self.problem(f"{where} {name!r}: shape {shape} holds {count} elements but \"data\" has {len(data)}", name)
            return None
        if datatype in FLOATS:  # JSON has no NaN or infinity: "NaN", "Infinity", "-Infinity" stand for them
            data = [SPECIAL_FLOATS.get(v, v) if isinstance(v, str) else v for v in data]
        if not self._data_fits(datatype, data):
            self.problem(f"{where} {name!r}: data of a {datatype} tensor must be "
                         f"{_kind_of(datatype)}", name)
            return None
        return Tensor(name, datatype, tuple(shape), tuple(data))

    @staticmethod
    def _data_fits(datatype: str, data: list) -> bool:
        if datatype == "BYTES":
            return all(isinstance(v, str) for v in data)
        if datatype == "BOOL":
            return all(isinstance(v, bool) for v in data)
        if datatype in FLOATS:
            return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data)
        return all(isinstance(v, int) and not isinstance(v, bool) for v in data)

    def tensors(self, raw, key: str) -> tuple[Tensor, ...]:
        if not isinstance(raw, list):
            self.problem(f"\"{key}\" must be a list of tensors", key)
            return ()
        found = [self.tensor(item, key[:-1]) for item in raw]
        return tuple(t for t in found if t is not None)


def _kind_of(datatype: str) -> str:
    if datatype == "BYTES":
        return "strings"
    if datatype == "BOOL":
        return "true or false"
    return "numbers (or \"NaN\", \"Infinity\", \"-Infinity\")" if datatype in FLOATS else "integers"


def load_case(path: Path, model: str) -> tuple[GoldenCase | None, list[Problem]]:
    """Parse one golden file. Returns the case, or None with every problem found."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [Problem(path, f"not valid JSON: {exc.msg}", exc.lineno, exc.colno)]
    reader = _CaseReader(path, text)
    if not isinstance(raw, dict):
        return None, [Problem(path, "a golden case is a JSON object with \"inputs\" and \"outputs\"", 1, 1)]
    for key in sorted(set(raw) - CASE_KEYS):
        reader.problem(f"unknown key {key!r} (expected {', '.join(sorted(CASE_KEYS))})", key)
    if "inputs" not in raw:
        reader.problem("no \"inputs\": a golden case sends at least one input tensor")
    inputs = reader.tensors(raw.get("inputs", []), "inputs")
    outputs, responses = (), None
    raw_outputs = raw.get("outputs", [])
    if isinstance(raw_outputs, list) and raw_outputs and all(isinstance(r, list) for r in raw_outputs):
        responses = tuple(reader.tensors(r, "outputs") for r in raw_outputs)
    else:
        outputs = reader.tensors(raw_outputs, "outputs")
    for key in ("atol", "rtol"):
        if key in raw and not (isinstance(raw[key], (int, float)) and raw[key] >= 0):
            reader.problem(f"\"{key}\" must be a non-negative number", key)
    version = raw.get("version")
    if version is not None and not (isinstance(version, int) and version >= 1):
        reader.problem("\"version\" must be a model version number (1, 2, ...)", "version")
    protocol = raw.get("protocol", "http")
    if protocol not in ("http", "grpc"):
        reader.problem(f"\"protocol\" must be \"http\" or \"grpc\", not {protocol!r}", "protocol")
    parameters = raw.get("parameters", {})
    if not isinstance(parameters, dict):
        reader.problem("\"parameters\" must be an object of request parameters", "parameters")
    if reader.problems:
        return None, reader.problems
    return GoldenCase(path, model, inputs, outputs, responses, raw.get("atol"), raw.get("rtol"),
                      version, protocol, parameters), []


def shape_fits(shape: tuple[int, ...], dims: list[int], max_batch_size: int) -> bool:
    if max_batch_size > 0:
        if not shape or not 1 <= shape[0] <= max_batch_size:
            return False
        shape = shape[1:]
    return len(shape) == len(dims) and all(d == -1 or d == s for s, d in zip(shape, dims))


def check_against_config(case: GoldenCase, model: Model) -> list[Problem]:
    """Names, data types and shapes of a case against the tensors the config declares."""
    if model.config is None:
        return []  # auto-completed config: known only once the server has loaded the model
    text = case.path.read_text(encoding="utf-8", errors="replace")
    problems = []
    mbs = model.config.max_batch_size
    for kind, tensors in (("input", case.inputs), ("output", case.expected)):
        declared = model.tensors(kind)
        for tensor in tensors:
            line = line_of(text, json.dumps(tensor.name))
            spec = declared.get(tensor.name)
            if spec is None:
                names = ", ".join(sorted(declared)) or "none"
                problems.append(Problem(case.path, f"{kind} {tensor.name!r} is not declared in "
                                        f"{model.name}/config.pbtxt (its {kind}s: {names})", line))
                continue
            want = datatype_name(spec.data_type)
            if tensor.datatype != want:
                problems.append(Problem(case.path, f"{kind} {tensor.name!r} is {tensor.datatype} here but "
                                        f"{want} in config.pbtxt", line))
            if not shape_fits(tensor.shape, list(spec.dims), mbs):
                batch = f"[batch 1..{mbs}] + " if mbs > 0 else ""
                problems.append(Problem(case.path, f"{kind} {tensor.name!r} has shape {list(tensor.shape)}, "
                                        f"which does not fit {batch}dims {list(spec.dims)} of config.pbtxt", line))
    return problems


# -- comparison -------------------------------------------------------------------------------

@dataclass(frozen=True)
class OutputResult:
    name: str
    passed: bool
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    message: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "passed": self.passed, "max_abs_diff": self.max_abs_diff,
                "max_rel_diff": self.max_rel_diff, "message": self.message}


def tolerances(case: GoldenCase, datatype: str) -> tuple[float, float]:
    default = FLOATS.get(datatype, 0.0)
    atol = case.atol if case.atol is not None else default
    rtol = case.rtol if case.rtol is not None else default
    return (atol, rtol) if datatype in FLOATS else (0.0, 0.0)


def compare(expected: Tensor, actual: np.ndarray | None, actual_datatype: str | None,
            atol: float, rtol: float) -> OutputResult:
    name = expected.name
    if actual is None:
        return OutputResult(name, False, message=f"output {name!r} is missing from the response")
    if actual_datatype and actual_datatype != expected.datatype:
        return OutputResult(name, False, message=f"output {name!r}: expected datatype {expected.datatype}, "
                            f"got {actual_datatype}")
    if tuple(actual.shape) != expected.shape:
        return OutputResult(name, False, message=f"output {name!r}: expected shape {list(expected.shape)}, "
                            f"got {list(actual.shape)}")
    want = expected.array()
    if expected.datatype == "BYTES":
        got = np.array([v if isinstance(v, bytes) else str(v).encode() for v in actual.reshape(-1)], dtype=object)
        bad = [i for i, (g, w) in enumerate(zip(got, want.reshape(-1))) if g != w]
        if not bad:
            return OutputResult(name, True)
        i = bad[0]
        return OutputResult(name, False, message=f"output {name!r}: {len(bad)} element(s) differ; first at "
                            f"{_index(i, expected.shape)}: expected {want.reshape(-1)[i].decode(errors='replace')!r}, "
                            f"got {got[i].decode(errors='replace')!r}")
    if expected.datatype not in FLOATS:  # integers and BOOL: exactly, in their own type
        got = np.asarray(actual).reshape(-1)
        bad_at = np.flatnonzero(got != want.reshape(-1))
        if not bad_at.size:
            return OutputResult(name, True, 0.0, 0.0)
        i = int(bad_at[0])
        return OutputResult(name, False, message=f"output {name!r}: {bad_at.size} of {got.size} element(s) differ; "
                            f"first at {_index(i, expected.shape)}: expected {want.reshape(-1)[i].item()!r}, "
                            f"got {got[i].item()!r}")
    w = want.astype(np.float64).reshape(-1)
    g = np.asarray(actual).astype(np.float64).reshape(-1)
    both_nan = np.isnan(w) & np.isnan(g)
    with np.errstate(invalid="ignore", divide="ignore"):
        abs_diff = np.where(both_nan, 0.0, np.abs(g - w))
        abs_diff = np.where(np.isinf(w) & (g == w), 0.0, abs_diff)
        rel_diff = np.where(abs_diff == 0, 0.0, abs_diff / np.abs(w))
    same_inf = np.isinf(w) & (g == w)
    with np.errstate(invalid="ignore"):
        bad = ~((abs_diff <= atol + rtol * np.nan_to_num(np.abs(w), posinf=0.0)) | both_nan | same_inf)
    max_abs = float(np.nanmax(abs_diff)) if abs_diff.size else 0.0
    max_rel = float(np.nanmax(rel_diff)) if rel_diff.size else 0.0
    if not bad.any():
        return OutputResult(name, True, max_abs, max_rel)
    worst = int(np.argmax(np.where(bad, np.nan_to_num(abs_diff, nan=np.inf), -1.0)))
    return OutputResult(
        name, False, max_abs, max_rel,
        f"output {name!r}: {int(bad.sum())} of {bad.size} element(s) outside atol={atol:g} rtol={rtol:g}; "
        f"worst at {_index(worst, expected.shape)}: expected {float(w[worst])!r}, got {float(g[worst])!r} "
        f"(abs diff {abs_diff[worst]:.3g}, rel diff {rel_diff[worst]:.3g})")


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []
