"""An answer compared with a golden case's expected tensors (the tolerances, the worst element
named), an error compared with the one a case expects, and an answer written as a case's tensors
(or error), such that loading it gives the same values."""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from triton_release.models.elements import compare_elements, json_figure
from triton_release.models.golden import FLOATS, ExpectedError, GoldenCase, Tensor


@dataclass(frozen=True)
class Answer:
    """One response: output name -> (array, datatype); an array is None when it did not decode."""

    outputs: dict[str, tuple[np.ndarray | None, str, str]]  # name -> (array, datatype, decode error)


@dataclass(frozen=True)
class Reply:
    """What the server answered one request: its responses (a decoupled model's stream: any
    number), or an error, the server's message (in a stream: after `answers`)."""

    answers: tuple[Answer, ...] = ()
    error: str | None = None
    status: str = ""  # "500", "StatusCode.INTERNAL"; "" in a stream
    latency_ms: float = 0.0

    @property
    def shown_error(self) -> str:
        return f"[{self.status}] {self.error}" if self.status else str(self.error)


@dataclass(frozen=True)
class OutputResult:
    name: str
    passed: bool
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    message: str = ""

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "passed": self.passed,
            "max_abs_diff": json_figure(self.max_abs_diff),
            "max_rel_diff": json_figure(self.max_rel_diff),
            "message": self.message,
        }


def tolerances(case: GoldenCase, datatype: str) -> tuple[float, float]:
    default = FLOATS.get(datatype, 0.0)
    atol = case.atol if case.atol is not None else default
    rtol = case.rtol if case.rtol is not None else default
    return (atol, rtol) if datatype in FLOATS else (0.0, 0.0)


def compare(
    expected: Tensor, actual: np.ndarray | None, actual_datatype: str | None, atol: float, rtol: float
) -> OutputResult:
    name = expected.name
    if actual is None:
        return OutputResult(name, False, message=f"output {name!r} is missing from the response")
    if actual_datatype and actual_datatype != expected.datatype:
        return OutputResult(
            name, False, message=f"output {name!r}: expected datatype {expected.datatype}, got {actual_datatype}"
        )
    if tuple(actual.shape) != expected.shape:
        return OutputResult(
            name, False, message=f"output {name!r}: expected shape {list(expected.shape)}, got {list(actual.shape)}"
        )
    found = compare_elements(expected.array(), actual, expected.datatype, atol, rtol)
    if found.within:
        return OutputResult(name, True, found.max_abs_diff, found.max_rel_diff)
    worst = found.worst_beyond
    assert worst is not None  # some element is beyond tolerance
    if expected.datatype in FLOATS:
        message = (
            f"output {name!r}: {found.beyond} of {found.size} element(s) outside atol={atol:g} rtol={rtol:g}; "
            f"worst at {worst.index}: expected {worst.reference}, got {worst.actual} "
            f"(abs diff {worst.abs_diff:.3g}, rel diff {worst.rel_diff:.3g})"
        )
    elif worst.abs_diff is not None:  # integers
        message = (
            f"output {name!r}: {found.beyond} of {found.size} element(s) differ; "
            f"worst at {worst.index}: expected {worst.reference}, got {worst.actual} "
            f"(abs diff {worst.abs_diff:g}, rel diff {worst.rel_diff:.3g})"
        )
    else:  # BOOL and BYTES
        message = (
            f"output {name!r}: {found.beyond} of {found.size} element(s) differ; "
            f"first at {worst.index}: expected {worst.reference}, got {worst.actual}"
        )
    return OutputResult(name, False, found.max_abs_diff, found.max_rel_diff, message)


def _bytes_json(value: object) -> str | dict:
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:  # binary: as base64, which load_case decodes back to these bytes
        return {"b64": base64.b64encode(value).decode("ascii")}


def _float_json(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    return ("Infinity" if value > 0 else "-Infinity") if math.isinf(value) else value


def tensor_json(name: str, array: np.ndarray, datatype: str) -> dict:
    """A server's output as a golden file's tensor (what `record` writes), such that loading it
    gives back the same values: binary BYTES as {"b64": ...}, NaN and infinities as strings."""
    data = array.reshape(-1).tolist()
    if datatype == "BYTES":
        data = [_bytes_json(v) for v in data]
    elif datatype in FLOATS:
        data = [_float_json(v) for v in data]
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": data}


# -- errors ---------------------------------------------------------------------------------------


def first_line(message: str) -> str:
    """An error message's first line: Triton appends the model's traceback below it."""
    return message.strip().splitlines()[0] if message.strip() else message


def compare_error(expected: ExpectedError, error: str | None, answered: list[str]) -> tuple[bool, str]:
    """An expected error against what the server did: answered with `error`, or (None) with the
    outputs `answered`. Passed or not, and what to say about it."""
    if error is None:
        what = f"outputs {', '.join(answered)}" if answered else "no outputs"
        return False, f"expected {expected}, but the model answered normally ({what})"
    if expected.matches(error):
        return True, f"answered with the expected error: {first_line(error)}"
    return False, f"expected {expected}, got another error: {first_line(error)}"


_PYTHON_BACKEND_PREFIX = re.compile(r"^Failed to process the request\(s\) for model '[^']*', message: ")


def error_json(message: str) -> str:
    """A server's error as a case's "error" (what `record` writes): its first line, without the
    Python backend's preamble naming the model instance, which depends on the instance that ran."""
    return _PYTHON_BACKEND_PREFIX.sub("", first_line(message))


# -- recording --------------------------------------------------------------------------------------


class NotRecorded(Exception):
    """What the server answered does not fit what the case asks for; the file stays as it is."""


def recorded(case: GoldenCase, raw: dict, replies: Sequence[Reply], decoupled: bool, overwrite: bool) -> dict:
    """`raw` (the case file's JSON) with `replies` written into the steps that have nothing to
    compare yet, or every step with `overwrite`: the outputs where the model answered, the error's
    text where the step asks for an error. Whether a step expects an answer or an error is the
    author's choice: a reply of the other kind raises NotRecorded."""
    raw_steps = raw["sequence"] if case.sequence is not None else [raw]
    for index, (step, reply, raw_step) in enumerate(zip(case.steps, replies, raw_steps), 1):
        if not (overwrite or (step.unrecorded and not step.no_responses(decoupled))):
            continue  # a decoupled model's "outputs": [] is recorded already: no response
        where = f"sequence step {index}: " if case.sequence is not None else ""
        if step.error is not None:
            if reply.error is None:
                raise NotRecorded(
                    f'{where}the case expects an error but the model answered; remove "error" to '
                    "record its outputs, or change the inputs"
                )
            raw_step["error"] = error_json(reply.error)
            continue
        if reply.error is not None:
            raise NotRecorded(
                f"{where}the server answered with an error ({first_line(reply.error)}); if the model "
                'is right to refuse these inputs, write "error": true in place of "outputs" and '
                "record again, which fills in the error's text; else fix the inputs"
            )
        responses = [
            [tensor_json(n, a, d) for n, (a, d, _) in sorted(answer.outputs.items()) if a is not None]
            for answer in reply.answers
        ]
        raw_step["outputs"] = responses if decoupled else (responses[0] if responses else [])
    return raw
