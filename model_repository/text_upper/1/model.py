"""String (BYTES) example.

UPPER  = each UTF-8 string upper-cased with Python's str.upper()
         (so "ß" becomes "SS").
LENGTH = number of unicode characters of each input string (int32).
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _to_text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            strings = [_to_text(v) for v in text.reshape(-1)]

            upper = np.array(
                [s.upper().encode("utf-8") for s in strings], dtype=np.object_
            ).reshape(text.shape)
            length = np.array([len(s) for s in strings], dtype=np.int32).reshape(
                text.shape
            )

            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("UPPER", upper),
                        pb_utils.Tensor("LENGTH", length),
                    ]
                )
            )
        return responses

    def finalize(self):
        pass
