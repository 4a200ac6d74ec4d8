"""A golden case sent to a running tritonserver: HTTP, gRPC, or a decoupled model's gRPC stream;
each answer compared with the case's expected tensors.

Every case has a deadline (its "timeout", default 60 s) on every protocol: the HTTP client's
network timeout, the gRPC call's deadline, the stream's deadline. A stream that ends without
its final response is cancelled, so closing it never waits on the model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from triton_release.models.answers import OutputResult, compare, tolerances
from triton_release.models.golden import DEFAULT_TIMEOUT, GoldenCase

STREAM_GRACE = 5.0  # the stream's own gRPC deadline, after the case's: only a backstop


@dataclass(frozen=True)
class CaseResult:
    case: str       # <model>/<case>
    path: str
    passed: bool
    latency_ms: float
    outputs: tuple[OutputResult, ...]
    message: str = ""

    def to_json(self) -> dict:
        return {"case": self.case, "path": self.path, "passed": self.passed, "latency_ms": self.latency_ms,
                "outputs": [o.to_json() for o in self.outputs], "message": self.message}


NUMPY2_MESSAGE = "output tensor shape does not match size of output"
NUMPY2_HINT = ("numpy 2 is known to break Triton 2.51's Python backend (`output tensor shape does not match "
               "size of output`); pin numpy<2 in the model's requirements.txt or use a base image with numpy 1.x")


STUB_DIED_MESSAGE = "is not healthy"
STUB_DIED_HINT = ("the model's Python process died: it ran out of the server's memory limit (the server_memory "
                  "setting; default 3/4 of this machine's memory) or crashed in native code")


def with_hint(message: str, always: bool = False) -> str:
    """Add what is known to cause a server error that names no cause."""
    if STUB_DIED_MESSAGE in message:
        return f"{message}. Hint: {STUB_DIED_HINT}"
    return f"{message}. Hint: {NUMPY2_HINT}" if always or NUMPY2_MESSAGE in message else message


@dataclass(frozen=True)
class Answer:
    """One response: output name -> (array, datatype); an array is None when it did not decode."""
    outputs: dict[str, tuple[np.ndarray | None, str, str]]  # name -> (array, datatype, decode error)


class InferenceFailed(Exception):
    pass


def _client(protocol: str, http_url: str, grpc_url: str, timeout: float):
    if protocol == "grpc":
        import tritonclient.grpc as lib
        return lib, lib.InferenceServerClient(grpc_url), {"client_timeout": timeout}
    import tritonclient.http as lib
    return lib, lib.InferenceServerClient(http_url, connection_timeout=timeout, network_timeout=timeout), {}


def _late(case: GoldenCase, timeout: float, what: str) -> str:
    return (f"case {case.model}/{case.name} {what} within {timeout:g} s (its \"timeout\", default "
            f"{DEFAULT_TIMEOUT:g}); the model hangs or is slower: fix it, or raise \"timeout\" in {case.path.name}")


def _timed_out(exc: Exception) -> bool:
    status = getattr(exc, "status", None)
    return (callable(status) and status() == "StatusCode.DEADLINE_EXCEEDED") or isinstance(exc, TimeoutError)


def _inputs(lib, case: GoldenCase) -> list:
    inputs = []
    for tensor in case.inputs:
        infer_input = lib.InferInput(tensor.name, list(tensor.shape), tensor.datatype)
        infer_input.set_data_from_numpy(tensor.array())
        inputs.append(infer_input)
    return inputs


def _answer(result) -> Answer:
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


def send(case: GoldenCase, http_url: str, grpc_url: str, decoupled: bool = False,
         timeout: float | None = None) -> tuple[list[Answer], float]:
    """The server's responses to the case's inputs, and the latency in ms (to the last response).
    Every call ends within `timeout` seconds (default: the case's own)."""
    timeout = case.timeout if timeout is None else timeout
    names = [t.name for t in case.expected]
    if decoupled or case.responses is not None:
        return _stream(case, grpc_url, names, timeout)
    lib, client, deadline = _client(case.protocol, http_url, grpc_url, timeout)
    outputs = [lib.InferRequestedOutput(n) for n in dict.fromkeys(names)] or None
    start = time.perf_counter()
    try:
        result = client.infer(case.model, _inputs(lib, case), model_version=str(case.version or ""),
                              outputs=outputs, parameters=case.parameters or None, **deadline)
    except Exception as exc:  # the server's own message is what the user needs
        if _timed_out(exc) or time.perf_counter() - start >= timeout:
            raise InferenceFailed(_late(case, timeout, "got no answer")) from None
        raise InferenceFailed(str(exc)) from None
    finally:
        client.close()
    return [_answer(result)], (time.perf_counter() - start) * 1000


def _stream(case: GoldenCase, grpc_url: str, names: list[str], timeout: float) -> tuple[list[Answer], float]:
    """A decoupled model's responses, in order, over one gRPC stream."""
    import queue

    import tritonclient.grpc as lib
    client = lib.InferenceServerClient(grpc_url)
    received: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: received.put((result, error)),
                        stream_timeout=timeout + STREAM_GRACE)
    answers = []
    finished = False
    start = time.perf_counter()
    try:
        client.async_stream_infer(case.model, _inputs(lib, case), model_version=str(case.version or ""),
                                  outputs=[lib.InferRequestedOutput(n) for n in dict.fromkeys(names)] or None,
                                  parameters=case.parameters or None, enable_empty_final_response=True)
        while True:
            try:
                result, error = received.get(timeout=max(0.1, timeout - (time.perf_counter() - start)))
            except queue.Empty:
                raise InferenceFailed(_late(case, timeout, f"got no final response (after {len(answers)} "
                                            "response(s))") + "; a decoupled model ends each request with "
                                      "TRITONSERVER_RESPONSE_COMPLETE_FINAL") from None
            if error is not None:
                if _timed_out(error):
                    raise InferenceFailed(_late(case, timeout, "got no final response"))
                raise InferenceFailed(str(error))
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
    return answers, (time.perf_counter() - start) * 1000


def run_case(case: GoldenCase, http_url: str, grpc_url: str, decoupled: bool = False) -> CaseResult:
    """Send the case's inputs and compare every listed output (every response, in order)."""
    label = f"{case.model}/{case.name}"
    start = time.perf_counter()
    try:
        answers, latency = send(case, http_url, grpc_url, decoupled)
    except InferenceFailed as exc:
        latency = (time.perf_counter() - start) * 1000
        return CaseResult(label, str(case.path), False, latency, (), with_hint(f"inference failed: {exc}"))
    expected = case.responses if case.responses is not None else (case.outputs,)
    if case.responses is not None and len(answers) != len(expected):
        return CaseResult(label, str(case.path), False, latency, (),
                          f"expected {len(expected)} responses, got {len(answers)}")
    compared: list[OutputResult] = []
    for index, (want, answer) in enumerate(zip(expected, answers)):
        prefix = f"response {index + 1}: " if case.responses is not None else ""
        for tensor in want:
            array, datatype, error = answer.outputs.get(tensor.name, (None, None, ""))
            if error:
                message = f"{prefix}output {tensor.name!r}: the server's answer does not fit its own shape ({error})"
                return CaseResult(label, str(case.path), False, latency, tuple(compared),
                                  with_hint(message, always=True))
            atol, rtol = tolerances(case, tensor.datatype)
            result = compare(tensor, array, datatype, atol, rtol)
            compared.append(replace(result, message=prefix + result.message) if result.message else result)
    passed = all(o.passed for o in compared)
    message = "; ".join(o.message for o in compared if not o.passed)
    return CaseResult(label, str(case.path), passed, latency, tuple(compared), message)
