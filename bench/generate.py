"""Generated model repositories of any size, in the shape of the example's add-one model."""

from __future__ import annotations

import json
import os
from pathlib import Path

MODEL_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + {offset}).astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
'''

CONFIG = '''\
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
'''


def write_model(root: Path, name: str, offset: int = 1, weights_bytes: int = 0) -> None:
    version = root / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    (version / "model.py").write_text(MODEL_PY.format(offset=offset))
    if weights_bytes:
        (version / "weights.bin").write_bytes(os.urandom(weights_bytes))
    golden = root / name / "golden"
    golden.mkdir(exist_ok=True)
    data = [1.0, 2.0, 3.0, 4.0]
    case = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": data}],
            "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "data": [d + offset for d in data]}]}
    (golden / "basic.json").write_text(json.dumps(case))


def generate_repository(root: Path, n: int, weights_bytes: int = 0) -> Path:
    for i in range(n):
        write_model(root, f"model_{i:04d}", offset=i % 7 + 1, weights_bytes=weights_bytes)
    return root
