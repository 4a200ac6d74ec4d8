"""A model's golden inputs as a workload to replay: what the latency gate sends through
perf_analyzer (models/latency/) and what `warmup: golden` writes into the image's config
(image/warmup.py).

A case can be replayed when it sends one plain request the model answers: not one that expects an
error, not a sequence (its steps need their correlation id, START and END), not one pinning
another version, with finite numbers and text (not binary) BYTES. A model that batches
(max_batch_size > 0) is replayed at the batch size of its first usable case, one sample per batch
row, as perf_analyzer's `-b` and Triton's `model_warmup` take them: each sample holds one row of
every input, without the batch dimension. A model that does not batch is replayed case by case,
each tensor whole. perf_analyzer sends every request of a run with one shape, so cases with
other input shapes (another batch size, another length of a variable dimension, other inputs) or
other request parameters than the first usable case's are left out with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from triton_release.models.golden.format import GoldenCase
from triton_release.models.golden.reader import load_case
from triton_release.models.repository import Model
from triton_release.models.tensors import FLOATS, Tensor

MAX_SAMPLES = 256  # rows replayed at most: perf_analyzer cycles through them, warm-up takes the first few


@dataclass(frozen=True)
class Sample:
    """One request's worth of every input (one batch row where the model batches): name ->
    (datatype, shape, flat data)."""

    case: str
    tensors: tuple[tuple[str, str, tuple[int, ...], tuple], ...]


@dataclass(frozen=True)
class Workload:
    model: str
    samples: tuple[Sample, ...] = ()
    batch_size: int | None = None  # -b: the model batches; None: it does not
    parameters: tuple[tuple[str, object], ...] = ()  # the request parameters every replayed case sends
    cases: tuple[str, ...] = ()  # the cases replayed
    left_out: tuple[str, ...] = ()  # "<model>/<case>: why"
    skipped: str = ""  # why nothing of the model can be replayed

    @property
    def usable(self) -> bool:
        return not self.skipped and bool(self.samples)

    def to_json(self) -> dict:
        return {
            "cases": list(self.cases),
            "batch_size": self.batch_size,
            "samples": len(self.samples),
            "parameters": dict(self.parameters),
            "left_out": list(self.left_out),
        }


def model_kind(model: Model) -> str:
    """Why the model's golden inputs cannot be replayed as plain requests, or ""."""
    config = model.config
    if model.is_ensemble:
        return ""  # an ensemble is replayed like any model: its steps run inside the server
    if config is not None and config.HasField("sequence_batching") and not config.sequence_batching.iterative_sequence:
        return (
            "a sequence model: its cases' steps need their correlation id with START and END, which a "
            "plain replay does not send"
        )
    if model.decoupled:
        return "a decoupled model: it answers over a stream, which this replay does not measure"
    return ""


def workload(model: Model, max_batch_size: int | None = None) -> Workload:
    """The golden cases of `model` as a workload. `max_batch_size`: the model's as served, for a
    model without config.pbtxt (Triton completes it); else its config's."""
    kind = model_kind(model)
    if kind:
        return Workload(model.name, skipped=kind)
    if not model.golden_cases:
        return Workload(model.name, skipped="no golden cases")
    batches = (model.config.max_batch_size if model.config is not None else max_batch_size or 0) > 0
    samples: list[Sample] = []
    cases: list[str] = []
    left_out: list[str] = []
    batch_size: int | None = None
    parameters: dict | None = None
    shapes: tuple | None = None  # the first replayed case's inputs: (name, shape of a sample)
    for path in model.golden_cases:
        case, _ = load_case(Path(path), model.name)
        if case is None:
            continue
        label = f"{model.name}/{case.name}"
        why = _not_replayable(case)
        if why:
            left_out.append(f"{label}: {why}")
            continue
        rows = _rows(case) if batches else None
        if batches and rows is None:
            left_out.append(f"{label}: its inputs do not share one batch dimension")
            continue
        if parameters is not None and dict(case.parameters) != parameters:
            left_out.append(f"{label}: other request parameters than {cases[0]}")
            continue
        if batches and batch_size is not None and rows != batch_size:
            left_out.append(f"{label}: batch size {rows}, the first replayed case's is {batch_size}")
            continue
        shaped = tuple((t.name, tuple(t.shape[1:] if batches else t.shape)) for t in case.inputs)
        if shapes is not None and shaped != shapes:
            left_out.append(
                f"{label}: inputs {_shapes(shaped)}, the first replayed case's are {_shapes(shapes)} "
                "(perf_analyzer sends one shape a run)"
            )
            continue
        shapes = shaped
        if batches:
            assert rows is not None
            batch_size = rows
            samples += [
                Sample(case.name, tuple((t.name, t.datatype, tuple(t.shape[1:]), _row(t, r)) for t in case.inputs))
                for r in range(rows)
            ]
        else:
            samples.append(
                Sample(case.name, tuple((t.name, t.datatype, tuple(t.shape), tuple(t.data)) for t in case.inputs))
            )
        parameters = dict(case.parameters)
        cases.append(label)
        if len(samples) >= MAX_SAMPLES:
            break
    if not samples:
        reasons = "; ".join(left_out[:3]) or "no golden case could be read"
        return Workload(
            model.name, left_out=tuple(left_out), skipped=f"no golden case sends a request it can replay ({reasons})"
        )
    return Workload(
        model.name,
        tuple(samples[:MAX_SAMPLES]),
        batch_size,
        tuple(sorted((parameters or {}).items())),
        tuple(cases),
        tuple(left_out),
    )


def _not_replayable(case: GoldenCase) -> str:
    if case.sequence is not None:
        return "a sequence case"
    if case.error is not None:
        return "it expects an error"
    if case.version is not None:
        return f"it pins version {case.version}"
    if not case.inputs:
        return "no inputs"
    for tensor in case.inputs:
        if tensor.datatype in FLOATS and not all(math.isfinite(v) for v in tensor.data):
            return f"input {tensor.name} holds NaN or infinity"
        if tensor.datatype == "BYTES" and any(isinstance(v, bytes) for v in tensor.data):
            return f"input {tensor.name} holds binary BYTES (b64)"
    if any(isinstance(v, float) for v in case.parameters.values()):
        return "a float request parameter (perf_analyzer sends int, bool and string ones)"
    return ""


def _shapes(shapes: tuple) -> str:
    return ", ".join(f"{name} [{', '.join(str(d) for d in shape)}]" for name, shape in shapes)


def _rows(case: GoldenCase) -> int | None:
    """The batch size every input of a batching model's case shares (its first dimension)."""
    sizes = {t.shape[0] if t.shape else None for t in case.inputs}
    size = sizes.pop() if len(sizes) == 1 else None
    return size if size else None


def _row(tensor: Tensor, index: int) -> tuple:
    per_row = math.prod(tensor.shape[1:])
    return tuple(tensor.data[index * per_row : (index + 1) * per_row])
