"""The golden case format and the case as the tool holds it: `GoldenCase`, its `Step`s, the
`ExpectedError` a step may expect (matched with RE2), the keys a case and a step may have, and the
bounds of its timeout. (Reading a file into a case: models/golden/reader.py; its tensors:
models/tensors.py.)

The format is the spec's (KServe v2 tensors under "inputs" and "outputs"), with:

- "timeout": seconds the case may take, on HTTP, gRPC and a decoupled model's stream alike
  (default 60, at most 3600). A model that hangs fails its case at the deadline.
- BYTES elements are strings, sent as their UTF-8 encoding. An element that is not valid UTF-8
  (binary data) is an object {"b64": "<standard base64, padded>"}; `record` writes one for
  every answer element that is not UTF-8, so a recorded case passes as it is.
- Integers must lie in their type's range (UINT8 0..255, ...), BOOL data are true or false,
  floats are finite in their type or "NaN", "Infinity", "-Infinity".
- "data" is flat row-major, or nested lists at most 64 deep.
- "error" instead of "outputs": the case expects the server to answer with an error whose message
  contains this text (or {"regex": "..."} searched in it; `true`: any error, which `record` fills
  in). An answer, or another error, fails the case. A regex is matched with RE2, whose time grows
  with the message's length alone, whatever the pattern: no backreferences, no lookaround.
- "sequence" instead of "inputs"/"outputs"/"error": a model with sequence_batching gets a list of
  steps, each {"inputs", "outputs" or "error"}, sent in order with one correlation id, START on the
  first, END on the last. Every other key ("timeout" included) holds for the whole sequence.
  A model with `sequence_batching { iterative_sequence: true }` is the exception: each request is a
  sequence of its own that the model reschedules until it is done, so its cases are plain ones,
  sent without a correlation id as NVIDIA's own tests send them.
- "parameters" may not name what Triton reserves (sequence_id, sequence_start, sequence_end,
  priority, timeout, headers, triton_*).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import re2

from triton_release.models.tensors import Tensor

CASE_KEYS = {
    "inputs",
    "outputs",
    "error",
    "sequence",
    "atol",
    "rtol",
    "version",
    "protocol",
    "parameters",
    "description",
    "timeout",
}
STEP_KEYS = {"inputs", "outputs", "error", "description"}
SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")
RESERVED_PARAMETERS = {*SEQUENCE_PARAMETERS, "priority", "timeout", "headers"}  # and any "triton_" name
DEFAULT_TIMEOUT = 60.0  # seconds a case may take, unless it says "timeout"
MAX_TIMEOUT = 3600.0


@dataclass(frozen=True)
class ExpectedError:
    """The error a case expects instead of outputs: a message containing `text`, or in which the
    regular expression `pattern` is found; neither: any error (written `"error": true`)."""

    text: str | None = None
    pattern: str | None = None

    @property
    def any(self) -> bool:
        return self.text is None and self.pattern is None

    def matches(self, message: str) -> bool:
        if self.pattern is not None:  # RE2: linear in the message, so no pattern outlasts the case
            return regex(self.pattern).search(message) is not None
        return self.text is None or self.text in message

    def __str__(self) -> str:
        if self.pattern is not None:
            return f"an error matching /{self.pattern}/"
        return "an error" if self.text is None else f"an error containing {self.text!r}"


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is the golden file's problem, said once by validate
    return options


class Pattern(Protocol):
    """What is used of a pattern RE2 compiled (google-re2 ships no types)."""

    def search(self, text: str) -> object | None: ...


@lru_cache(maxsize=256)
def regex(pattern: str) -> Pattern:
    """An expected error's pattern compiled by RE2 (raises re2.error where RE2 refuses it)."""
    return re2.compile(pattern, _re2_options())


def regex_problem(pattern: str) -> str | None:
    """Why an expected error's pattern cannot be used, or None. Python's syntax is checked first,
    then RE2's, which refuses what could take exponential time (backreferences, lookaround) and
    patterns too large for its memory limit."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"does not compile ({exc})"
    try:
        regex(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return (
            f"is refused ({reason}): expected errors are matched with RE2, whose time is linear in the "
            "message whatever the pattern; RE2 has no backreferences (\\1) or lookaround ((?=...), (?<=...)) "
            "and limits repetition counts to 1000. Rewrite the pattern without them, or expect a text the "
            "message contains"
        )
    return None


@dataclass(frozen=True)
class Step:
    """One request: its inputs and what it expects, tensors (a decoupled model: a list of
    responses) or an error. A sequence case is several; any other case is one."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...] = ()
    responses: tuple[tuple[Tensor, ...], ...] | None = None  # decoupled: expected responses in order
    error: ExpectedError | None = None
    span: tuple[int, int] | None = field(default=None, compare=False)  # where a sequence step is in its file
    # "outputs": [] written out: for a decoupled model, exactly zero responses (a missing key: not compared)
    empty_outputs: bool = False

    @property
    def expected(self) -> tuple[Tensor, ...]:
        """Every expected output tensor, over all responses of a decoupled step."""
        if self.responses is not None:
            return tuple(t for response in self.responses for t in response)
        return self.outputs

    @property
    def unrecorded(self) -> bool:
        """Nothing to compare yet: no outputs, or `"error": true`; what `record` fills in."""
        return not self.expected and (self.error is None or self.error.any)

    def no_responses(self, decoupled: bool) -> bool:
        """Whether the step expects exactly zero responses: a decoupled model's `"outputs": []`."""
        return decoupled and self.empty_outputs and self.error is None


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
    timeout: float = DEFAULT_TIMEOUT  # for the whole case: every step of a sequence together
    error: ExpectedError | None = None
    sequence: tuple[Step, ...] | None = None  # a sequence case's steps, in order
    empty_outputs: bool = False  # "outputs": [] written out (Step.empty_outputs)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def steps(self) -> tuple[Step, ...]:
        """The requests the case sends, in order: a sequence's steps, else the case itself."""
        if self.sequence is not None:
            return self.sequence
        return (Step(self.inputs, self.outputs, self.responses, self.error, empty_outputs=self.empty_outputs),)

    @property
    def expected(self) -> tuple[Tensor, ...]:
        """Every expected output tensor, over all responses (and steps) of the case."""
        return tuple(t for step in self.steps for t in step.expected)

    @property
    def unrecorded(self) -> bool:
        return any(step.unrecorded for step in self.steps)
