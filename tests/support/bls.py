"""BLS callers whose calls are made out of plain sight: through aliases of InferenceRequest, and
in a helper module of the version folder. Each answers with what its callee answers (the add-one
model's OUTPUT0 for INPUT0), so its golden case is the add-one case.

The stub sets InferenceRequest on triton_python_backend_utils only after it imported the model's
modules: an alias of it made at module level fails to load, so these make theirs in functions."""

from __future__ import annotations

from support.models import golden_case, python_config

HELPED_MODEL = '''\
import triton_python_backend_utils as tb

from .helpers import ask


class TritonPythonModel:
    """Answers with what the helper module's callee answers for INPUT0."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = tb.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(tb.InferenceResponse([tb.Tensor("OUTPUT0", ask(x))]))
        return responses
'''

HELPERS = """\
import functools

import triton_python_backend_utils as tb

CALLEE = {callee!r}


def _request():
    # the stub sets InferenceRequest on triton_python_backend_utils after importing the model's modules
    from triton_python_backend_utils import InferenceRequest as IR
    return functools.partial(IR, model_name=CALLEE, requested_output_names=["OUTPUT0"])


def ask(x):
    answer = _request()(inputs=[tb.Tensor("INPUT0", x)]).exec()
    if answer.has_error():
        raise tb.TritonModelException(answer.error().message())
    return tb.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
"""

ALIASED_MODEL = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers with what {callee!r} answers for INPUT0, asked through an alias of InferenceRequest."""

    def execute(self, requests):
        from triton_python_backend_utils import InferenceRequest as IR
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            answer = IR(model_name={callee!r}, inputs=[pb_utils.Tensor("INPUT0", x)],
                        requested_output_names=["OUTPUT0"]).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
'''

ROUTER_MODEL = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Asks the model its config names: which one is known at run time only."""

    def initialize(self, args):
        import json
        self.target = json.loads(args["model_config"])["parameters"]["target"]["string_value"]

    def execute(self, requests):
        make = getattr(pb_utils, "InferenceRequest")
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            answer = make(model_name=self.target, inputs=[pb_utils.Tensor("INPUT0", x)],
                          requested_output_names=["OUTPUT0"]).exec()
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
'''


def helped_caller_files(name: str, callee: str) -> dict[str, str]:
    """A caller whose call is made in helpers.py of its version folder, through a partial of an
    alias, with the callee's name in a module constant."""
    return {
        f"{name}/config.pbtxt": python_config(name),
        f"{name}/1/model.py": HELPED_MODEL,
        f"{name}/1/helpers.py": HELPERS.format(callee=callee),
        f"{name}/golden/basic.json": golden_case(),
    }


def aliased_caller_files(name: str, callee: str) -> dict[str, str]:
    """A caller calling `callee` through `from triton_python_backend_utils import InferenceRequest as IR`."""
    return {
        f"{name}/config.pbtxt": python_config(name),
        f"{name}/1/model.py": ALIASED_MODEL.format(callee=callee),
        f"{name}/golden/basic.json": golden_case(),
    }


def router_files(name: str, target: str) -> dict[str, str]:
    """A caller whose callee is chosen at run time (from its config), which the code cannot tell."""
    config = python_config(name) + f'parameters {{ key: "target" value: {{ string_value: "{target}" }} }}\n'
    return {
        f"{name}/config.pbtxt": config,
        f"{name}/1/model.py": ROUTER_MODEL,
        f"{name}/golden/basic.json": golden_case(),
    }


AUTO_COMPLETE = """
    @staticmethod
    def auto_complete_config(config):
        config.set_max_batch_size(8)
        config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        return config
"""


def completing_caller_files(name: str, callee: str) -> dict[str, str]:
    """A BLS caller without config.pbtxt, as NVIDIA's QA models are: its auto_complete_config
    declares its tensors, and the model it calls is computed at run time (validate then advises
    declaring it in a config.pbtxt)."""
    from support.models import bls_caller_files

    files = bls_caller_files(name, callee, computed=True)
    del files[f"{name}/config.pbtxt"]
    model = files[f"{name}/1/model.py"]
    files[f"{name}/1/model.py"] = model.replace(
        "class TritonPythonModel:\n", "class TritonPythonModel:" + AUTO_COMPLETE, 1
    )
    return files
