"""Ensemble step 2.

SCORE = sum of FEATURES over the last axis (keepdims), float32, shape [batch, 1]
LABEL = 1 where SCORE > 0 else 0, int32, shape [batch, 1]
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            features = pb_utils.get_input_tensor_by_name(request, "FEATURES").as_numpy()
            features = features.astype(np.float32)
            score = np.sum(features, axis=-1, keepdims=True, dtype=np.float32)
            score = score.astype(np.float32)
            label = (score > 0).astype(np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("SCORE", score),
                        pb_utils.Tensor("LABEL", label),
                    ]
                )
            )
        return responses

    def finalize(self):
        pass
