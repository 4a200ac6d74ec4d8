"""Golden cases: the file format, loading with every problem located, checks against the
model's config, and warnings. (An answer compared with a case: models/answers.py.)

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

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import re2

from triton_release.models.repository import Model, datatype_name
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


@lru_cache(maxsize=256)
def regex(pattern: str):
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

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def steps(self) -> tuple[Step, ...]:
        """The requests the case sends, in order: a sequence's steps, else the case itself."""
        if self.sequence is not None:
            return self.sequence
        return (Step(self.inputs, self.outputs, self.responses, self.error),)

    @property
    def expected(self) -> tuple[Tensor, ...]:
        """Every expected output tensor, over all responses (and steps) of the case."""
        return tuple(t for step in self.steps for t in step.expected)

    @property
    def unrecorded(self) -> bool:
        return any(step.unrecorded for step in self.steps)


class _CaseReader:
    """Reads one golden file, collecting every problem with the line it is on."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text
        self.problems: list[Problem] = []
        self.prefix = ""  # "sequence step N: " while a step is read
        self.span: tuple[int, int] | None = None  # and where that step is in the file

    def problem(self, message: str, near: str | None = None) -> None:
        line = None
        if near is not None:
            line = line_in(self.text, json.dumps(near), self.span)
        elif self.span is not None:
            line = line_in(self.text, "", self.span)
        self.problems.append(Problem(self.path, self.prefix + message, line))

    def tensor(self, raw, where: str) -> Tensor | None:
        if not isinstance(raw, dict):
            self.problem(f"{where} must be an object with name, datatype, shape and data")
            return None
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            self.problem(f'{where} has no "name"')
            return None
        for key in sorted(set(raw) - TENSOR_KEYS):
            self.problem(f"{where} {name!r}: unknown key {key!r} (expected {', '.join(sorted(TENSOR_KEYS))})", key)
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

    def tensors(self, raw, key: str) -> tuple[Tensor, ...]:
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
        return Step(inputs, outputs, responses, error, self.span)

    def expected_error(self, raw) -> ExpectedError | None:
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

    def sequence(self, raw) -> tuple[Step, ...]:
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
                    f"unknown key {key!r} (a step has {', '.join(sorted(STEP_KEYS))}; the case's other "
                    "keys hold for the whole sequence)",
                    key,
                )
            steps.append(self.step(item))
        self.prefix, self.span = "", None
        return tuple(steps)

    def parameters(self, raw) -> None:
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


def load_case(path: Path, model: str) -> tuple[GoldenCase | None, list[Problem]]:
    """Parse one golden file. Returns the case, or None with every problem found."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [Problem(path, f"not valid JSON: {exc.msg}", exc.lineno, exc.colno)]
    except RecursionError:
        return None, [
            Problem(
                path,
                f'nested too deep to read (a golden file\'s "data" may nest at most '
                f"{MAX_DEPTH} levels); write the data flat, row-major",
                1,
                1,
            )
        ]
    reader = _CaseReader(path, text)
    if not isinstance(raw, dict):
        return None, [Problem(path, 'a golden case is a JSON object with "inputs" and "outputs"', 1, 1)]
    for key in sorted(set(raw) - CASE_KEYS):
        reader.problem(f"unknown key {key!r} (expected {', '.join(sorted(CASE_KEYS))})", key)
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
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
        reader.problem(
            f'"timeout" must be the seconds the case may take, more than 0 and at most '
            f"{MAX_TIMEOUT:g} (default {DEFAULT_TIMEOUT:g})",
            "timeout",
        )
    if reader.problems:
        return None, reader.problems
    return GoldenCase(
        path,
        model,
        top.inputs,
        top.outputs,
        top.responses,
        raw.get("atol"),
        raw.get("rtol"),
        version,
        protocol,
        parameters,
        float(timeout),
        top.error,
        sequence,
    ), []


def shape_fits(shape: tuple[int, ...], dims: list[int], max_batch_size: int) -> bool:
    if max_batch_size > 0:
        if not shape or not 1 <= shape[0] <= max_batch_size:
            return False
        shape = shape[1:]
    return len(shape) == len(dims) and all(d == -1 or d == s for s, d in zip(shape, dims))


def sequence_model(model: Model) -> bool:
    """The model's config has sequence_batching, not iterative: each request needs a correlation id."""
    return (
        model.config is not None
        and model.config.HasField("sequence_batching")
        and not model.config.sequence_batching.iterative_sequence
    )


def iterative_model(model: Model) -> bool:
    """`sequence_batching { iterative_sequence: true }`: each request is a sequence of its own, which
    the model reschedules until it is done. NVIDIA's own tests (qa/L0_backend_python/
    request_rescheduling) send such a model plain requests without a correlation id; so do its cases."""
    return (
        model.config is not None
        and model.config.HasField("sequence_batching")
        and model.config.sequence_batching.iterative_sequence
    )


def check_against_config(case: GoldenCase, model: Model) -> list[Problem]:
    """The case's form (a sequence or one request) against the model's batching, and the names,
    data types and shapes of every step against the tensors the config declares."""
    if model.config is None:
        return []  # auto-completed config: known only once the server has loaded the model
    text = case.path.read_text(encoding="utf-8", errors="replace")
    problems = []
    if sequence_model(model) and case.sequence is None:
        problems.append(
            Problem(
                case.path,
                f"{model.name}/config.pbtxt has sequence_batching: every request "
                "needs a correlation id and START/END flags, which only a sequence case sends; "
                'write it as {"sequence": [{"inputs": [...], "outputs": [...]}, ...]} '
                "(one step is a sequence too)",
                line_of(text, '"inputs"'),
            )
        )
    if case.sequence is not None and iterative_model(model):
        problems.append(
            Problem(
                case.path,
                f"a sequence case, but {model.name}/config.pbtxt has sequence_batching "
                "with iterative_sequence: true, whose every request is a sequence of its own that "
                "the model reschedules until it is done (no correlation id, no START/END). Write "
                'each request as a case of its own with "inputs" and "outputs" (a decoupled '
                "model's responses as a list of responses)",
                line_of(text, '"sequence"'),
            )
        )
    elif case.sequence is not None and not sequence_model(model):
        problems.append(
            Problem(
                case.path,
                f"a sequence case, but {model.name}/config.pbtxt has no "
                "sequence_batching: add it to the config, or write each request as a case of "
                'its own with "inputs" and "outputs"',
                line_of(text, '"sequence"'),
            )
        )
    mbs = model.config.max_batch_size
    for index, step in enumerate(case.steps):
        prefix = f"sequence step {index + 1}: " if case.sequence is not None else ""
        for kind, tensors in (("input", step.inputs), ("output", step.expected)):
            declared = model.tensors(kind)
            for tensor in tensors:
                line = line_in(text, json.dumps(tensor.name), step.span)
                spec = declared.get(tensor.name)
                if spec is None:
                    names = ", ".join(sorted(declared)) or "none"
                    problems.append(
                        Problem(
                            case.path,
                            f"{prefix}{kind} {tensor.name!r} is not declared in "
                            f"{model.name}/config.pbtxt (its {kind}s: {names})",
                            line,
                        )
                    )
                    continue
                want = datatype_name(spec.data_type)
                if tensor.datatype != want:
                    problems.append(
                        Problem(
                            case.path,
                            f"{prefix}{kind} {tensor.name!r} is {tensor.datatype} here but {want} in config.pbtxt",
                            line,
                        )
                    )
                if not shape_fits(tensor.shape, list(spec.dims), mbs):
                    batch = f"[batch 1..{mbs}] + " if mbs > 0 else ""
                    problems.append(
                        Problem(
                            case.path,
                            f"{prefix}{kind} {tensor.name!r} has shape "
                            f"{list(tensor.shape)}, which does not fit {batch}dims "
                            f"{list(spec.dims)} of config.pbtxt",
                            line,
                        )
                    )
    return problems


# -- warnings -----------------------------------------------------------------------------------


def case_warnings(case: GoldenCase, model: Model) -> list[Problem]:
    """What is legal in a case but proves less than its author may think."""
    warnings = []
    text = case.path.read_text(encoding="utf-8", errors="replace")
    record = f"`triton-release record --image IMAGE --models {model.name}`"
    silent = [(i, s) for i, s in enumerate(case.steps, 1) if not s.expected and not s.responses and s.error is None]
    if silent:
        outputs = ", ".join(sorted(model.tensors("output"))) or "its outputs"
        warnings.append(
            Problem(
                case.path,
                f'{_which(case, silent)}no "outputs": the case proves only that the '
                f"model answers, not what it answers; list {outputs} with their expected data, or "
                f"fill them in with {record}",
                line_in(text, '"outputs"', silent[0][1].span),
            )
        )
    vague = [(i, s) for i, s in enumerate(case.steps, 1) if s.error is not None and s.error.any]
    if vague:
        warnings.append(
            Problem(
                case.path,
                f'{_which(case, vague)}"error": true passes on any error, so it proves '
                "only that the model refuses, not why; write part of the expected message instead, "
                f"or fill it in with {record}",
                line_in(text, '"error"', vague[0][1].span),
            )
        )
    return warnings


def _which(case: GoldenCase, steps: list[tuple[int, Step]]) -> str:
    """ "sequence steps 1, 3: " for a sequence case; nothing for a case of one request."""
    if case.sequence is None:
        return ""
    return f"sequence step{'s' if len(steps) > 1 else ''} {', '.join(str(i) for i, _ in steps)}: "
