"""Reading one golden file into a `GoldenCase` (`load_case`), with every problem found, each on
the line it is on, a sequence step's inside that step (`line_in`). The format it reads:
models/golden/format.py."""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from triton_release.models.golden.format import (
    CASE_KEYS,
    DEFAULT_TIMEOUT,
    MAX_TIMEOUT,
    RESERVED_PARAMETERS,
    SEQUENCE_PARAMETERS,
    STEP_KEYS,
    ExpectedError,
    GoldenCase,
    Step,
    regex_problem,
)
from triton_release.models.tensors import (
    DATATYPES,
    FLOAT_MAX,
    FLOATS,
    INTEGERS,
    MAX_DEPTH,
    SPECIAL_FLOATS,
    TENSOR_KEYS,
    Tensor,
    bytes_element,
    element_index,
    flatten,
    kind_of,
    out_of_range,
    short,
)
from triton_release.problems import Problem, line_of


class _CaseReader:
    """Reads one golden file, collecting every problem with the line it is on."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text
        self.problems: list[Problem] = []
        self.prefix = ""  # "sequence step N: " while a step is read
        self.span: tuple[int, int] | None = None  # and where that step is in the file
        self.unread: set[str] = set()  # tensors named but not read (a problem each): not "left out"

    def problem(self, message: str, near: str | None = None) -> None:
        line = None
        if near is not None:
            line = line_in(self.text, json.dumps(near), self.span)
        elif self.span is not None:
            line = line_in(self.text, "", self.span)
        self.problems.append(Problem(self.path, self.prefix + message, line))

    def tensor(self, raw: object, where: str) -> Tensor | None:
        found = self._tensor(raw, where)
        if found is None and isinstance(raw, dict) and isinstance(raw.get("name"), str):
            self.unread.add(raw["name"])
        return found

    def _tensor(self, raw: object, where: str) -> Tensor | None:
        if not isinstance(raw, dict):
            self.problem(f"{where} must be an object with name, datatype, shape and data")
            return None
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            self.problem(f'{where} has no "name"')
            return None
        for key in sorted(set(raw) - TENSOR_KEYS):
            self.problem(
                f"{where} {name!r}: unknown key {key!r}{did_you_mean(key, TENSOR_KEYS)} "
                f"(expected {', '.join(sorted(TENSOR_KEYS))})",
                key,
            )
        datatype = raw.get("datatype")
        if datatype not in DATATYPES:
            self.problem(
                f"{where} {name!r}: datatype {datatype!r} is not a KServe v2 type ({', '.join(sorted(DATATYPES))})",
                name,
            )
            return None
        shape = raw.get("shape")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            self.problem(f'{where} {name!r}: "shape" must be a list of non-negative integers', name)
            return None
        if "data" not in raw:
            self.problem(f'{where} {name!r}: no "data"', name)
            return None
        data = flatten(raw["data"])
        if data is None:
            self.problem(
                f'{where} {name!r}: "data" is nested deeper than {MAX_DEPTH} levels; write it flat '
                "(row-major) or nested as deep as the shape",
                name,
            )
            return None
        count = math.prod(shape)
        if len(data) != count:
            self.problem(f'{where} {name!r}: shape {shape} holds {count} elements but "data" has {len(data)}', name)
            return None
        if datatype in FLOATS:  # JSON has no NaN or infinity: "NaN", "Infinity", "-Infinity" stand for them
            data = [SPECIAL_FLOATS.get(v, v) if isinstance(v, str) else v for v in data]
        if datatype == "BYTES":
            elements = [bytes_element(v) for v in data]
            bad = next((i for i, v in enumerate(elements) if v is None), None)
            if bad is not None:
                self.problem(
                    f"{where} {name!r}: element {element_index(bad, tuple(shape))} of a BYTES tensor is "
                    f"{short(data[bad])}; write text as a string, binary data as "
                    '{"b64": "<base64>"}',
                    name,
                )
                return None
            return Tensor(name, datatype, tuple(shape), tuple(elements))
        if not self._data_fits(datatype, data):
            self.problem(f"{where} {name!r}: data of a {datatype} tensor must be {kind_of(datatype)}", name)
            return None
        bad = out_of_range(datatype, data)
        if bad is not None:
            low, high = INTEGERS.get(datatype) or (f"{-FLOAT_MAX[datatype]:g}", f"{FLOAT_MAX[datatype]:g}")
            self.problem(
                f"{where} {name!r}: {short(data[bad])} at {element_index(bad, tuple(shape))} does not fit "
                f"{datatype} ({low} to {high})",
                name,
            )
            return None
        return Tensor(name, datatype, tuple(shape), tuple(data))

    @staticmethod
    def _data_fits(datatype: str, data: list) -> bool:
        if datatype == "BOOL":
            return all(isinstance(v, bool) for v in data)
        if datatype in FLOATS:
            return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data)
        return all(isinstance(v, int) and not isinstance(v, bool) for v in data)

    def tensors(self, raw: object, key: str) -> tuple[Tensor, ...]:
        if not isinstance(raw, list):
            self.problem(f'"{key}" must be a list of tensors', key)
            return ()
        found = [self.tensor(item, key[:-1]) for item in raw]
        return tuple(t for t in found if t is not None)

    def step(self, raw: dict) -> Step:
        """A request's inputs and what it expects: "outputs" (tensors, or a list of responses)
        or an "error"."""
        if "inputs" not in raw:
            self.problem('no "inputs": a golden case sends at least one input tensor')
        inputs = self.tensors(raw.get("inputs", []), "inputs")
        outputs: tuple[Tensor, ...] = ()
        responses: tuple[tuple[Tensor, ...], ...] | None = None
        raw_outputs = raw.get("outputs", [])
        if isinstance(raw_outputs, list) and raw_outputs and all(isinstance(r, list) for r in raw_outputs):
            responses = tuple(self.tensors(r, "outputs") for r in raw_outputs)
        else:
            outputs = self.tensors(raw_outputs, "outputs")
        error = None
        if "error" in raw:
            error = self.expected_error(raw["error"])
            if "outputs" in raw:
                self.problem(
                    'both "outputs" and "error": a request expects an answer or an error, not '
                    "both; keep the one the model should give",
                    "error",
                )
        empty = raw.get("outputs") == [] and "outputs" in raw
        return Step(inputs, outputs, responses, error, self.span, empty_outputs=empty)

    def expected_error(self, raw: object) -> ExpectedError | None:
        if raw is True:
            return ExpectedError()
        if isinstance(raw, str) and raw:
            return ExpectedError(text=raw)
        if isinstance(raw, dict) and set(raw) == {"regex"} and isinstance(raw["regex"], str) and raw["regex"]:
            why = regex_problem(raw["regex"])
            if why is not None:
                self.problem(f'"error": the regex {raw["regex"]!r} {why}', "error")
                return None
            return ExpectedError(pattern=raw["regex"])
        self.problem(
            '"error" must be text the expected error message contains, {"regex": "..."}, or '
            "true (any error; `record` fills in its text)",
            "error",
        )
        return None

    def sequence(self, raw: object) -> tuple[Step, ...]:
        if not isinstance(raw, list) or not raw:
            self.problem(
                '"sequence" must be a list of steps, each {"inputs": [...], "outputs": [...]} '
                '(or "error" instead of "outputs")',
                "sequence",
            )
            return ()
        spans = _spans(self.text, "sequence", len(raw))
        steps = []
        for index, item in enumerate(raw):
            self.prefix, self.span = f"sequence step {index + 1}: ", spans[index] if spans else None
            if not isinstance(item, dict):
                self.problem('a step is an object with "inputs" and "outputs" (or "error")')
                continue
            for key in sorted(set(item) - STEP_KEYS):
                self.problem(
                    f"unknown key {key!r}{did_you_mean(key, STEP_KEYS)} (a step has "
                    f"{', '.join(sorted(STEP_KEYS))}; the case's other keys hold for the whole sequence)",
                    key,
                )
            steps.append(self.step(item))
        self.prefix, self.span = "", None
        return tuple(steps)

    def parameters(self, raw: object) -> None:
        if not isinstance(raw, dict):
            self.problem('"parameters" must be an object of request parameters', "parameters")
            return
        for key in raw:
            if key in SEQUENCE_PARAMETERS:
                self.problem(
                    f"parameter {key!r} is Triton's sequence control, which the case sends itself: write "
                    'the case as {"sequence": [{"inputs": ..., "outputs": ...}, ...]}, sent with one '
                    "correlation id, START on the first step and END on the last",
                    key,
                )
            elif key in RESERVED_PARAMETERS or key.startswith("triton_"):
                hint = '; the case\'s deadline is its own "timeout" key' if key == "timeout" else ""
                self.problem(
                    f"parameter {key!r} is reserved by Triton and cannot be sent as a request parameter{hint}", key
                )


def line_in(text: str, needle: str, span: tuple[int, int] | None = None) -> int | None:
    """The line of `needle`'s first appearance in `text`; with `span` (a sequence step's offsets),
    its first appearance in the step, else the step's first line."""
    if span is None:
        return line_of(text, needle)
    start, end = span
    found = text.find(needle, start, end) if needle else -1
    return text.count("\n", 0, found if found >= 0 else start) + 1


_BLANK = re.compile(r"[ \t\r\n]*")


def _past_blanks(text: str, at: int) -> int:
    found = _BLANK.match(text, at)
    assert found is not None
    return found.end()


def _spans(text: str, key: str, count: int) -> list[tuple[int, int]]:
    """Where each of the `count` elements of the list under `key` is in `text` (start and end
    offsets), or [] when that list is not found."""
    decoder = json.JSONDecoder()
    needle = json.dumps(key)
    at = text.find(needle)
    while at >= 0:
        i = _past_blanks(text, at + len(needle))
        if text.startswith(":", i):
            i = _past_blanks(text, i + 1)
        if text.startswith("[", i):
            spans: list[tuple[int, int]] = []
            i = _past_blanks(text, i + 1)
            try:
                while len(spans) < count and not text.startswith("]", i):
                    _, end = decoder.raw_decode(text, i)
                    spans.append((i, end))
                    i = _past_blanks(text, end)
                    if text.startswith(",", i):
                        i = _past_blanks(text, i + 1)
            except (ValueError, RecursionError):
                spans = []
            if len(spans) == count:
                return spans
        at = text.find(needle, at + 1)
    return []


def did_you_mean(key: str, known: set[str]) -> str:
    """'; did you mean 'outputs'?' for a misspelt key, or ''."""
    close = difflib.get_close_matches(key, sorted(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


@dataclass(frozen=True)
class ReadCase:
    """A golden file as read: its problems, and the case made of what could be read (None when it
    is no JSON object), with the names of the tensors it gives that could not be read."""

    case: GoldenCase | None
    problems: list[Problem]
    unread: frozenset[str] = frozenset()


def load_case(path: Path, model: str) -> tuple[GoldenCase | None, list[Problem]]:
    """Parse one golden file. Returns the case, or None with every problem found."""
    read = read_case(path, model)
    return (None, read.problems) if read.problems else (read.case, [])


def read_case(path: Path, model: str) -> ReadCase:
    """Parse one golden file: every problem found, and as much of the case as could be read (so
    that validate also checks the rest of it against the model's config in the same run)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return ReadCase(None, [Problem(path, f"not valid JSON: {exc.msg}", exc.lineno, exc.colno)])
    except RecursionError:
        return ReadCase(
            None,
            [
                Problem(
                    path,
                    f'nested too deep to read (a golden file\'s "data" may nest at most '
                    f"{MAX_DEPTH} levels); write the data flat, row-major",
                    1,
                    1,
                )
            ],
        )
    reader = _CaseReader(path, text)
    if not isinstance(raw, dict):
        return ReadCase(None, [Problem(path, 'a golden case is a JSON object with "inputs" and "outputs"', 1, 1)])
    for key in sorted(set(raw) - CASE_KEYS):
        reader.problem(
            f"unknown key {key!r}{did_you_mean(key, CASE_KEYS)} (expected {', '.join(sorted(CASE_KEYS))})", key
        )
    top, sequence = Step(()), None
    if "sequence" in raw:
        for key in ("inputs", "outputs", "error"):
            if key in raw:
                reader.problem(
                    f'"{key}" beside "sequence": each step of a sequence holds its own inputs and '
                    "outputs (or error); move it into a step",
                    key,
                )
        sequence = reader.sequence(raw["sequence"])
    else:
        top = reader.step(raw)
    for key in ("atol", "rtol"):
        if key in raw and not (isinstance(raw[key], (int, float)) and raw[key] >= 0):
            reader.problem(f'"{key}" must be a non-negative number', key)
    version = raw.get("version")
    if version is not None and not (isinstance(version, int) and version >= 1):
        reader.problem('"version" must be a model version number (1, 2, ...)', "version")
    protocol = raw.get("protocol", "http")
    if protocol not in ("http", "grpc"):
        reader.problem(f'"protocol" must be "http" or "grpc", not {protocol!r}', "protocol")
    parameters = raw.get("parameters", {})
    reader.parameters(parameters)
    timeout = raw.get("timeout", DEFAULT_TIMEOUT)
    bad_timeout = isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT
    if bad_timeout:
        reader.problem(
            f'"timeout" must be the seconds the case may take, more than 0 and at most '
            f"{MAX_TIMEOUT:g} (default {DEFAULT_TIMEOUT:g})",
            "timeout",
        )
    case = GoldenCase(
        path,
        model,
        top.inputs,
        top.outputs,
        top.responses,
        raw.get("atol") if isinstance(raw.get("atol"), (int, float)) else None,
        raw.get("rtol") if isinstance(raw.get("rtol"), (int, float)) else None,
        version if isinstance(version, int) else None,
        protocol if protocol in ("http", "grpc") else "http",
        parameters if isinstance(parameters, dict) else {},
        DEFAULT_TIMEOUT if bad_timeout else float(timeout),
        top.error,
        sequence,
        top.empty_outputs,
    )
    return ReadCase(case, reader.problems, frozenset(reader.unread))
