"""Ensemble step 1: NORMALIZED = (RAW - 2.0) / 4.0 (float32, elementwise)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.offset = np.float32(2.0)
        self.divisor = np.float32(4.0)

    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW").as_numpy()
            raw = raw.astype(np.float32)
            normalized = ((raw - self.offset) / self.divisor).astype(np.float32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("NORMALIZED", normalized)]
                )
            )
        return responses

    def finalize(self):
        pass
