"""Model repositories written from a few lines of data: configs, models, golden cases.

The add-one model is a plain-text template, add_one_model.py.tmpl beside this module, read (never
imported) by bench/generate.py too: one copy, and neither tests nor bench imports the other."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

ADD_ONE_TEMPLATE = Path(__file__).with_name("add_one_model.py.tmpl")
PYTHON_MODEL = ADD_ONE_TEMPLATE.read_text().format(offset=1)  # adds 1 to INPUT0 (FP32) into OUTPUT0


def python_config(name: str, max_batch_size: int = 8, dims: str = "[ 4 ]", dtype: str = "TYPE_FP32") -> str:
    return textwrap.dedent(f'''\
        name: "{name}"
        backend: "python"
        max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT0" data_type: {dtype} dims: {dims} }} ]
        output [ {{ name: "OUTPUT0" data_type: {dtype} dims: {dims} }} ]
        ''')


def golden_case(shape=(1, 4), data=(1, 2, 3, 4), out=(2, 3, 4, 5), dtype="FP32", **extra) -> str:
    case = {
        "inputs": [{"name": "INPUT0", "datatype": dtype, "shape": list(shape), "data": list(data)}],
        "outputs": [{"name": "OUTPUT0", "datatype": dtype, "shape": list(shape), "data": list(out)}],
        **extra,
    }
    return json.dumps(case, indent=2)


def write_tree(root: Path, files: dict[str, str | bytes | None]) -> Path:
    """Write {relative path: content}; None makes an empty folder."""
    for rel, content in files.items():
        path = root / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def python_model_files(name: str, **config) -> dict[str, str]:
    return {
        f"{name}/config.pbtxt": python_config(name, **config),
        f"{name}/1/model.py": PYTHON_MODEL,
        f"{name}/golden/basic.json": golden_case(),
    }


PYTHON_MODEL_RAISING = """\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights file is missing: put weights.npy in the version folder")

    def execute(self, requests):
        return []
"""

DECOUPLED_MODEL = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Sends COUNT responses, 0, 1, ... COUNT-1, then the final flag."""

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

DECOUPLED_CONFIG = """\
name: "counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

SLEEPY_MODEL = """\
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(600)

    def execute(self, requests):
        return []
"""

HANGING_MODEL = """\
import time


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(600)
        return []
"""

NEVER_FINAL_MODEL = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled: one response per request, and never the final flag."""

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([0], dtype=np.int32))]))
        return None
'''

FLOODING_MODEL = '''\
import sys


class TritonPythonModel:
    """Writes {megabytes} MB of log lines during initialize, then fails to load."""

    def initialize(self, args):
        line = "flood " + "x" * 1017 + "\\n"
        for _ in range({megabytes} * 1024):
            sys.stdout.write(line)
        sys.stdout.flush()
        raise RuntimeError("flooded the log, then failed")

    def execute(self, requests):
        return []
'''

MEMORY_HOG_MODEL = '''\
class TritonPythonModel:
    """Takes memory (written, so really in use) until something stops it."""

    def execute(self, requests):
        held = []
        while True:
            held.append(b"\\x01" * (64 << 20))
'''


def decoupled_config(name: str) -> str:
    return DECOUPLED_CONFIG.replace('name: "counter"', f'name: "{name}"')


def case_file(tmp_path: Path, model: str, text: str):
    """A golden case of `model` written to a file and loaded, every problem refused."""
    from triton_release.models import golden

    path = tmp_path / f"{model}-case.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    case, problems = golden.load_case(path, model)
    assert not problems, problems
    return case


BLS_CALLER = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers with what model {callee!r} answers for INPUT0 (a BLS call)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            call = pb_utils.InferenceRequest({how}, inputs=[pb_utils.Tensor("INPUT0", x)],
                                             requested_output_names=["OUTPUT0"])
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
'''


def bls_caller_files(name: str, callee: str, computed: bool = False) -> dict[str, str]:
    """A Python model answering through a BLS call of `callee`: named literally, or (`computed`)
    built at run time, which only a declaration in its config can tell the release."""
    how = f"model_name={callee!r}" if not computed else f"model_name=''.join([{callee[:1]!r}, {callee[1:]!r}])"
    return {
        f"{name}/config.pbtxt": python_config(name),
        f"{name}/1/model.py": BLS_CALLER.format(callee=callee, how=how),
        f"{name}/golden/basic.json": golden_case(),
    }


ACCUMULATOR_MODEL = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A sequence model: OUTPUT0 is the running sum of INPUT0 over the requests of one correlation
    id. A negative amount is answered with an error and leaves the sum as it was."""

    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            sequence, flags = request.correlation_id(), request.flags()
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.totals[sequence] = 0
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            total = self.totals.get(sequence, 0)
            if (x < 0).any():
                response = pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(
                    f"negative amount {int(x.min())}: the total stays {total}"))
            else:
                total = self.totals[sequence] = total + int(x.sum())
                response = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.full(x.shape, total, np.int32))])
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                self.totals.pop(sequence, None)
            responses.append(response)
        return responses
'''

STREAMING_ACCUMULATOR_MODEL = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Decoupled and sequenced: one response per element of INPUT0, the running sum so far over
    the correlation id, then the final flag."""

    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        for request in requests:
            sequence, flags = request.correlation_id(), request.flags()
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.totals[sequence] = 0
            sender = request.get_response_sender()
            for value in pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().reshape(-1).tolist():
                self.totals[sequence] = self.totals.get(sequence, 0) + int(value)
                total = np.array([self.totals[sequence]], np.int32)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)]))
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                self.totals.pop(sequence, None)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

REFUSING_MODEL = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT0 = 2 * INPUT0; negative inputs are refused with a TritonModelException."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if (x < 0).any():
                raise pb_utils.TritonModelException(f"negative input {int(x.min())}: amounts must be at least 0")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
'''


def sequence_config(name: str, strategy: str = "direct", decoupled: bool = False) -> str:
    """An INT32 [1] -> INT32 [1] Python model with sequence_batching: `direct` (max_batch_size 0)
    or `oldest` (max_batch_size 4, so its tensors have a batch dimension)."""
    batching = "oldest { max_candidate_sequences: 4 }" if strategy == "oldest" else ""
    policy = "model_transaction_policy { decoupled: true }\n" if decoupled else ""
    return (
        python_config(name, max_batch_size=4 if strategy == "oldest" else 0, dims="[ 1 ]", dtype="TYPE_INT32")
        + f"sequence_batching {{ max_sequence_idle_microseconds: 5000000 {batching} }}\n"
        + policy
    )


def iterative_config(name: str, decoupled: bool = False) -> str:
    """An INT32 [1] -> INT32 [1] Python model (max_batch_size 0) with `sequence_batching {
    iterative_sequence: true }`: it reschedules its requests itself."""
    policy = "model_transaction_policy { decoupled: true }\n" if decoupled else ""
    return (
        python_config(name, max_batch_size=0, dims="[ 1 ]", dtype="TYPE_INT32")
        + "sequence_batching { iterative_sequence: true }\n"
        + policy
    )


def int_tensor(name: str, values, batched: bool = False) -> dict:
    values = list(values)
    return {"name": name, "datatype": "INT32", "shape": [1, len(values)] if batched else [len(values)], "data": values}


def sequence_case(*steps, batched: bool = False, **extra) -> str:
    """A sequence case of the accumulator: each step is (amount, total), or (amount, "error text")
    for a step expecting an error."""
    written = []
    for amount, expected in steps:
        step = {"inputs": [int_tensor("INPUT0", [amount], batched)]}
        if isinstance(expected, str):
            step["error"] = expected
        else:
            step["outputs"] = [int_tensor("OUTPUT0", [expected], batched)]
        written.append(step)
    return json.dumps({"sequence": written, **extra}, indent=2)


def auto_complete_files(name: str, max_batch_size: int = 4) -> dict[str, str]:
    """The add-one model without a config.pbtxt: its model.py completes its own config."""
    complete = f"""
    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size({max_batch_size})
        config.add_input({{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}})
        config.add_output({{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}})
        return config
"""
    model = PYTHON_MODEL.replace("class TritonPythonModel:\n", "class TritonPythonModel:" + complete + "\n")
    shape = (1, 4) if max_batch_size else (4,)
    return {f"{name}/1/model.py": model, f"{name}/golden/basic.json": golden_case(shape=shape)}


def ensemble_files(name: str, steps: list[str]) -> dict[str, str]:
    """An ensemble chaining add-one models `steps` (INPUT0 -> OUTPUT0 each), IN -> OUT."""
    tensors = ["IN", *[f"t{i}" for i in range(len(steps) - 1)], "OUT"]
    chain = ",\n".join(
        f'  {{ model_name: "{step}" model_version: -1 '
        f'input_map {{ key: "INPUT0" value: "{tensors[i]}" }} '
        f'output_map {{ key: "OUTPUT0" value: "{tensors[i + 1]}" }} }}'
        for i, step in enumerate(steps)
    )
    config = (
        textwrap.dedent(f'''\
        name: "{name}"
        platform: "ensemble"
        max_batch_size: 8
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        ''')
        + f"ensemble_scheduling {{ step [\n{chain}\n] }}\n"
    )
    return {f"{name}/config.pbtxt": config, f"{name}/1/README.txt": "an ensemble: no files of its own\n"}


def pipeline_files(name: str, first: str, second: str) -> dict[str, str]:
    """An ensemble `name` running two add-one models, `first` then `second` (so it adds 2), with
    its golden case."""
    case = json.dumps(
        {
            "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}],
            "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [1, 4], "data": [3, 4, 5, 6]}],
        }
    )
    return {**ensemble_files(name, [first, second]), f"{name}/golden/basic.json": case}
