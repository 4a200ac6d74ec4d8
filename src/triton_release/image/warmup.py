"""`warmup: golden`: model_warmup entries written from each model's golden inputs into the image's
copy of its config.pbtxt, so that Triton runs them while it loads the model and reports it ready
only once it is warm (load balancers wait). The user's config.pbtxt is never touched: the image
holds the copy (image/layers.py's model files), with the inputs' raw data in the model's
`warmup/` folder, where Triton reads `input_data_file` from.

One entry per replayable golden case (models/workload.py), at most MAX_ENTRIES: a batching model's
first row at batch size 1, a model that does not batch the case's tensors whole. Left out, with
the reason: models without config.pbtxt (their batch dimension is Triton's to complete), ensembles
(their steps warm up themselves), sequence and decoupled models, models whose config already has
model_warmup, and models with no replayable case.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf import text_format

from triton_release.models.config.schema import model_config_pb2
from triton_release.models.repository import CONFIG_FILE, Model, Repository
from triton_release.models.tensors import Tensor
from triton_release.models.workload import workload

MODES = ("off", "golden")
FOLDER = "warmup"
MAX_ENTRIES = 8


@dataclass(frozen=True)
class Warmup:
    """What `warmup: golden` wrote: model -> the cases it warms up with; and the models left out."""

    written: tuple[tuple[str, tuple[str, ...]], ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict:
        return {"models": {m: list(cases) for m, cases in self.written}, "left_out": dict(self.left_out)}


def raw_bytes(datatype: str, shape: tuple[int, ...], data: tuple) -> bytes:
    """A tensor as Triton reads an input_data_file: row-major, little-endian; BYTES elements each
    with its 4-byte little-endian length."""
    if datatype == "BYTES":
        parts = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in data]
        return b"".join(struct.pack("<I", len(p)) + p for p in parts)
    array = Tensor("x", datatype, shape, data).array()
    return array.astype(array.dtype.newbyteorder("<")).tobytes()


def _config_type(datatype: str) -> int:
    return model_config_pb2.DataType.Value("TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}")


def _why_not(model: Model) -> str:
    if model.config is None:
        return "no config.pbtxt: its batch dimension is for Triton to complete"
    if model.is_ensemble:
        return "an ensemble: the models it runs warm up themselves"
    if model.config.model_warmup:
        return "its config.pbtxt has model_warmup already"
    return ""


def entries(model: Model) -> tuple[str, dict[str, bytes], tuple[str, ...]] | str:
    """The model_warmup text to append, the files of its warmup/ folder, the cases used; or why none.
    The entries are ModelWarmup messages serialised by text_format, so whatever a case or input name
    holds (quotes, backslashes, newlines, any unicode) reaches Triton escaped as it parses it."""
    why = _why_not(model)
    if why:
        return why
    load = workload(model)
    if not load.usable:
        return load.skipped
    warm = model_config_pb2.ModelConfig()  # only its model_warmup: appended to the config's own text
    files: dict[str, bytes] = {}
    cases: list[str] = []
    seen = set()
    for sample in load.samples:
        if sample.case in seen:
            continue  # a batching case gives one row per sample: its first warms up
        seen.add(sample.case)
        index = len(warm.model_warmup)
        entry = warm.model_warmup.add(name=f"golden {sample.case}", batch_size=1)
        for number, (name, datatype, shape, data) in enumerate(sample.tensors):
            file = f"golden-{index}-{number}"
            files[f"{FOLDER}/{file}"] = raw_bytes(datatype, shape, data)
            sent = entry.inputs[name]
            sent.data_type = _config_type(datatype)
            sent.dims.extend(shape)
            sent.input_data_file = file
        cases.append(sample.case)
        if len(warm.model_warmup) >= MAX_ENTRIES:
            break
    text = (
        "\n# added by triton-release (warmup: golden): the model's golden inputs, run before it is ready\n"
        + text_format.MessageToString(warm, as_utf8=True)
    )
    return text, files, tuple(cases)


def with_warmup(
    repo: Repository, model_files: dict[str, dict[str, bytes]]
) -> tuple[dict[str, dict[str, bytes]], Warmup]:
    """`model_files` (model -> {relative path: content}, the image's copies) with each model's
    config copy given its model_warmup and its warmup/ files."""
    found = {model: dict(files) for model, files in model_files.items()}
    written, left_out = [], []
    for model in repo:
        made = entries(model)
        if isinstance(made, str):
            left_out.append((model.name, made))
            continue
        text, files, cases = made
        files_of = found.setdefault(model.name, {})
        config = files_of.get(CONFIG_FILE) or model.config_path.read_bytes()
        files_of[CONFIG_FILE] = config.rstrip(b"\n") + b"\n" + text.encode("utf-8")
        files_of.update(files)
        written.append((model.name, cases))
    return found, Warmup(tuple(written), tuple(left_out))
