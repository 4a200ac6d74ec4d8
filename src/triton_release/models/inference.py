"""A golden case sent to a running tritonserver: HTTP, gRPC, or a decoupled model's gRPC stream;
a sequence case's steps in order under one correlation id; each answer, or error, compared with
what the case expects.

Every case has a deadline (its "timeout", default 60 s) on every protocol: the HTTP client's
network timeout, the gRPC call's deadline, the stream's deadline. A sequence's steps share the
case's deadline: each request gets the time the steps before it left. A stream that ends without
its final response is cancelled, so closing it never waits on the model.

A sequence is sent to its end even after a step failed, so the server frees its slot at once (an
unfinished sequence holds one until max_sequence_idle_microseconds); only a request that gets no
answer at all stops it.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING

from triton_release.errors import Interrupted
from triton_release.models.answers import Answer, OutputResult, Reply, compare, compare_error, tolerances
from triton_release.models.golden.format import DEFAULT_TIMEOUT, GoldenCase, Step

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

STREAM_GRACE = 5.0  # the stream's own gRPC deadline, after the case's: only a backstop
NOT_THE_MODEL = {"StatusCode.UNAVAILABLE", "StatusCode.CANCELLED"}  # gRPC failures no model answered with


@dataclass(frozen=True)
class CaseResult:
    case: str  # <model>/<case>
    path: str
    passed: bool
    latency_ms: float
    outputs: tuple[OutputResult, ...]
    message: str = ""
    steps: int = 0  # a sequence case's steps (0: not a sequence)
    steps_passed: int = 0
    error: str | None = None  # the first error the server answered with, expected or not

    def to_json(self) -> dict:
        return {
            "case": self.case,
            "path": self.path,
            "passed": self.passed,
            "latency_ms": self.latency_ms,
            "outputs": [o.to_json() for o in self.outputs],
            "message": self.message,
            "steps": self.steps or None,
            "steps_passed": self.steps_passed if self.steps else None,
            "error": self.error,
        }


NUMPY2_MESSAGE = "output tensor shape does not match size of output"
NUMPY2_HINT = (
    "numpy 2 is known to break Triton 2.51's Python backend (`output tensor shape does not match "
    "size of output`); pin numpy<2 in the model's requirements.txt or use a base image with numpy 1.x"
)


STUB_DIED_MESSAGE = "is not healthy"
STUB_DIED_HINT = (
    "the model's Python process died: it ran out of the server's memory limit (the server_memory "
    "setting; default 3/4 of this machine's memory) or crashed in native code"
)

NO_SEQUENCE_MESSAGE = "must specify a non-zero or non-empty correlation ID"
NO_SEQUENCE_HINT = (
    'the model has sequence_batching: write the case as {"sequence": [{"inputs": ..., '
    '"outputs": ...}, ...]}, whose steps are sent with one correlation id'
)


def with_hint(message: str, always: bool = False) -> str:
    """Add what is known to cause a server error that names no cause."""
    if STUB_DIED_MESSAGE in message:
        return f"{message}. Hint: {STUB_DIED_HINT}"
    if NO_SEQUENCE_MESSAGE in message:
        return f"{message}. Hint: {NO_SEQUENCE_HINT}"
    return f"{message}. Hint: {NUMPY2_HINT}" if always or NUMPY2_MESSAGE in message else message


@dataclass(frozen=True)
class Exchange:
    """A case's replies, one per step; `failure` when a request got no answer (the deadline, the
    server unreachable): why, and the steps after it were not sent."""

    replies: tuple[Reply, ...]
    latency_ms: float
    failure: str = ""


class InferenceFailed(Exception):
    pass


def _client(
    protocol: str, http_url: str, grpc_url: str, timeout: float
) -> tuple[ModuleType, httpclient.InferenceServerClient | grpcclient.InferenceServerClient, dict[str, float]]:
    if protocol == "grpc":
        import tritonclient.grpc as lib

        return lib, lib.InferenceServerClient(grpc_url), {"client_timeout": timeout}
    import tritonclient.http as lib

    _quiet_hub()
    return lib, lib.InferenceServerClient(http_url, connection_timeout=timeout, network_timeout=timeout), {}


def _quiet_hub() -> None:
    """The HTTP client waits for its answer inside gevent's hub, so a signal's `Interrupted` can be
    raised there. gevent throws it into the waiting call, as it should, but prints it first as the
    hub's own error: an ordinary stop showed a traceback. An interrupt is not an error to the hub."""
    try:
        from gevent.hub import Hub
    except ImportError:  # a client that does not wait in gevent
        return
    if not issubclass(Interrupted, Hub.NOT_ERROR):
        Hub.NOT_ERROR = (*Hub.NOT_ERROR, Interrupted)


def _late(case: GoldenCase, what: str) -> str:
    whole = ", for the whole sequence" if case.sequence is not None else ""
    return (
        f'case {case.model}/{case.name} {what} within {case.timeout:g} s (its "timeout"{whole}, default '
        f'{DEFAULT_TIMEOUT:g}); the model hangs or is slower: fix it, or raise "timeout" in {case.path.name}'
    )


def _timed_out(exc: Exception) -> bool:
    status = getattr(exc, "status", None)
    return (callable(status) and status() == "StatusCode.DEADLINE_EXCEEDED") or isinstance(exc, TimeoutError)


def _server_error(exc: Exception, stream: bool = False) -> tuple[str, str] | None:
    """(message, status) when `exc` is the server answering with an error; None when no answer
    came (unreachable, cancelled) or the client refused to send."""
    from tritonclient.utils import InferenceServerException

    if not isinstance(exc, InferenceServerException):
        return None
    status = exc.status()
    if status is None:  # the client's own refusal; in a stream, a response carrying an error
        return (exc.message(), "") if stream else None
    return None if str(status) in NOT_THE_MODEL else (exc.message(), str(status))


def _inputs(lib: ModuleType, step: Step) -> list:
    inputs = []
    for tensor in step.inputs:
        infer_input = lib.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.array())
        inputs.append(infer_input)
    return inputs


def _answer(result: httpclient.InferResult | grpcclient.InferResult) -> Answer:
    response = result.get_response()
    described = response.get("outputs", []) if isinstance(response, dict) else response.outputs
    outputs = {}
    for out in described:
        name, datatype = (out["name"], out["datatype"]) if isinstance(out, dict) else (out.name, out.datatype)
        try:
            outputs[name] = (result.as_numpy(name), datatype, "")
        except ValueError as exc:  # the data does not fill the shape the server sent
            outputs[name] = (None, datatype, str(exc))
    return Answer(outputs)


def ask(case: GoldenCase, http_url: str, grpc_url: str, decoupled: bool = False) -> Exchange:
    """Send the case's requests in order, a sequence's under one correlation id (new for each run,
    START on the first step, END on the last), all within the case's deadline."""
    steps = case.steps
    correlation_id = secrets.randbelow(1 << 62) + 1 if case.sequence is not None else 0
    replies: list[Reply] = []
    start = time.perf_counter()
    for index, step in enumerate(steps):
        where = f" to sequence step {index + 1}" if correlation_id else ""
        control = (
            {"sequence_id": correlation_id, "sequence_start": index == 0, "sequence_end": index == len(steps) - 1}
            if correlation_id
            else {}
        )
        left = case.timeout - (time.perf_counter() - start)
        try:
            if left <= 0:
                raise InferenceFailed(_late(case, f"got no answer{where}"))
            if decoupled or step.responses is not None:
                replies.append(_stream(case, step, grpc_url, left, control, where))
            else:
                replies.append(_infer(case, step, http_url, grpc_url, left, control, where))
        except InferenceFailed as exc:
            return Exchange(tuple(replies), (time.perf_counter() - start) * 1000, str(exc))
    return Exchange(tuple(replies), (time.perf_counter() - start) * 1000)


def _infer(
    case: GoldenCase, step: Step, http_url: str, grpc_url: str, timeout: float, control: dict, where: str
) -> Reply:
    lib, client, deadline = _client(case.protocol, http_url, grpc_url, timeout)
    outputs = [lib.InferRequestedOutput(n) for n in dict.fromkeys(t.name for t in step.expected)] or None
    start = time.perf_counter()
    try:
        result = client.infer(
            case.model,
            _inputs(lib, step),
            model_version=str(case.version or ""),
            outputs=outputs,
            parameters=case.parameters or None,
            **control,
            **deadline,
        )
    except Exception as exc:  # the server's own message is what the user needs
        if _timed_out(exc) or time.perf_counter() - start >= timeout:
            raise InferenceFailed(_late(case, f"got no answer{where}")) from None
        answered = _server_error(exc)
        if answered is None:
            raise InferenceFailed(str(exc)) from None
        return Reply((), answered[0], answered[1], (time.perf_counter() - start) * 1000)
    finally:
        client.close()
    return Reply((_answer(result),), latency_ms=(time.perf_counter() - start) * 1000)


def _stream(case: GoldenCase, step: Step, grpc_url: str, timeout: float, control: dict, where: str) -> Reply:
    """A decoupled model's responses, in order, over one gRPC stream, until the final one or an error."""
    import queue

    import tritonclient.grpc as lib

    client = lib.InferenceServerClient(grpc_url)
    received: queue.Queue = queue.Queue()
    client.start_stream(
        callback=lambda result, error: received.put((result, error)), stream_timeout=timeout + STREAM_GRACE
    )
    answers: list[Answer] = []
    finished = False
    start = time.perf_counter()
    names = dict.fromkeys(t.name for t in step.expected)
    try:
        client.async_stream_infer(
            case.model,
            _inputs(lib, step),
            model_version=str(case.version or ""),
            outputs=[lib.InferRequestedOutput(n) for n in names] or None,
            parameters=case.parameters or None,
            enable_empty_final_response=True,
            **control,
        )
        while True:
            try:
                result, error = received.get(timeout=max(0.1, timeout - (time.perf_counter() - start)))
            except queue.Empty:
                raise InferenceFailed(
                    _late(case, f"got no final response{where} (after {len(answers)} response(s))")
                    + "; a decoupled model ends each request with "
                    "TRITONSERVER_RESPONSE_COMPLETE_FINAL"
                ) from None
            if error is not None:
                if _timed_out(error):
                    raise InferenceFailed(_late(case, f"got no final response{where}"))
                answered = _server_error(error, stream=True)
                if answered is None:
                    raise InferenceFailed(str(error))
                return Reply(tuple(answers), answered[0], answered[1], (time.perf_counter() - start) * 1000)
            response = result.get_response()
            if response.outputs:
                answers.append(_answer(result))
            final = response.parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                finished = True
                break
    finally:  # cancelled unless it ended: closing must not wait on a model that never finishes
        client.stop_stream(cancel_requests=not finished)
        client.close()
    return Reply(tuple(answers), latency_ms=(time.perf_counter() - start) * 1000)


@dataclass(frozen=True)
class StepOutcome:
    passed: bool
    outputs: tuple[OutputResult, ...] = ()
    message: str = ""


def judge(case: GoldenCase, step: Step, reply: Reply, decoupled: bool = False) -> StepOutcome:
    """One reply against what its step expects: every listed output (every response, in order),
    or the expected error. A decoupled model's `"outputs": []` expects exactly zero responses."""
    if step.error is not None:
        answered = sorted({name for answer in reply.answers for name in answer.outputs})
        passed, message = compare_error(step.error, reply.error, answered)
        return StepOutcome(passed, (), message if passed else with_hint(message))
    if reply.error is not None:
        return StepOutcome(False, (), with_hint(f"inference failed: {reply.shown_error}"))
    if step.no_responses(decoupled) and reply.answers:
        return StepOutcome(
            False,
            (),
            f'expected no response ("outputs": [] for a decoupled model), got {len(reply.answers)}; remove '
            '"outputs" if the responses are not to be compared',
        )
    expected = step.responses if step.responses is not None else (step.outputs,)
    if step.responses is not None and len(reply.answers) != len(expected):
        return StepOutcome(False, (), f"expected {len(expected)} responses, got {len(reply.answers)}")
    if step.outputs and not reply.answers:
        return StepOutcome(False, (), "expected a response with outputs, got none")
    compared: list[OutputResult] = []
    for index, (want, answer) in enumerate(zip(expected, reply.answers)):
        prefix = f"response {index + 1}: " if step.responses is not None else ""
        for tensor in want:
            array, datatype, error = answer.outputs.get(tensor.name, (None, None, ""))
            if error:
                message = f"{prefix}output {tensor.name!r}: the server's answer does not fit its own shape ({error})"
                return StepOutcome(False, tuple(compared), with_hint(message, always=True))
            atol, rtol = tolerances(case, tensor.datatype)
            result = compare(tensor, array, datatype, atol, rtol)
            compared.append(replace(result, message=prefix + result.message) if result.message else result)
    passed = all(o.passed for o in compared)
    return StepOutcome(passed, tuple(compared), "; ".join(o.message for o in compared if not o.passed))


def run_case(case: GoldenCase, http_url: str, grpc_url: str, decoupled: bool = False) -> CaseResult:
    """Send the case's requests and judge every reply. A sequence's result counts the steps that
    passed and names each that failed."""
    label = f"{case.model}/{case.name}"
    exchange = ask(case, http_url, grpc_url, decoupled)
    outcomes = [judge(case, step, reply, decoupled) for step, reply in zip(case.steps, exchange.replies)]
    compared = tuple(o for outcome in outcomes for o in outcome.outputs)
    error = next((r.error for r in exchange.replies if r.error is not None), None)
    passed = not exchange.failure and all(o.passed for o in outcomes)
    failure = with_hint(f"inference failed: {exchange.failure}") if exchange.failure else ""
    if case.sequence is None:
        message = failure or (outcomes[0].message if outcomes else "")
        return CaseResult(label, str(case.path), passed, exchange.latency_ms, compared, message, error=error)
    total, good = len(case.steps), sum(o.passed for o in outcomes)
    said = [f"sequence step {i}: {o.message}" for i, o in enumerate(outcomes, 1) if o.message and not o.passed]
    if passed:
        said = [f"step {i} {o.message}" for i, o in enumerate(outcomes, 1) if o.message]
    message = "; ".join([*said, failure] if failure else said)
    message = f"{message} ({good} of {total} steps passed)" if message else f"{good} of {total} steps passed"
    return CaseResult(label, str(case.path), passed, exchange.latency_ms, compared, message, total, good, error)
