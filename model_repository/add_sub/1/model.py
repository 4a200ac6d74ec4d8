"""Batched add/sub example, in the style of Triton's python_backend add_sub.

OUTPUT0 = (INPUT0 + INPUT1) * scale
OUTPUT1 = (INPUT0 - INPUT1) * scale

``scale`` is a float32 vector of 4 values loaded in ``initialize`` from the
file named by the ``model_path`` parameter, relative to the version folder.
All requests of a dynamic batch are concatenated, computed once, then split
back per request.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        model_path = model_config["parameters"]["model_path"]["string_value"]
        weights_file = os.path.join(
            args["model_repository"], args["model_version"], model_path
        )
        self.scale = np.load(weights_file).astype(np.float32).reshape(4)

        out0 = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        out1 = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.out0_dtype = pb_utils.triton_string_to_numpy(out0["data_type"])
        self.out1_dtype = pb_utils.triton_string_to_numpy(out1["data_type"])

    def execute(self, requests):
        in0_list = []
        in1_list = []
        sizes = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            in0_list.append(in0.astype(np.float32))
            in1_list.append(in1.astype(np.float32))
            sizes.append(in0.shape[0])

        in0_all = np.concatenate(in0_list, axis=0)
        in1_all = np.concatenate(in1_list, axis=0)

        out0_all = ((in0_all + in1_all) * self.scale).astype(self.out0_dtype)
        out1_all = ((in0_all - in1_all) * self.scale).astype(self.out1_dtype)

        responses = []
        start = 0
        for size in sizes:
            end = start + size
            out0 = pb_utils.Tensor("OUTPUT0", np.ascontiguousarray(out0_all[start:end]))
            out1 = pb_utils.Tensor("OUTPUT1", np.ascontiguousarray(out1_all[start:end]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
            start = end
        return responses

    def finalize(self):
        pass
