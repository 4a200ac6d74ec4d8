"""Golden cases, one import: the format and the case (models/golden/format.py), reading a golden
file with every problem located (models/golden/reader.py), checks against the model's config and
warnings (models/golden/checks.py), and the tensors a case holds (models/tensors.py). (An answer
compared with a case: models/answers.py.)"""

from __future__ import annotations

from triton_release.models.golden.checks import case_warnings, check_against_config, iterative_model, sequence_model
from triton_release.models.golden.format import DEFAULT_TIMEOUT, ExpectedError, GoldenCase, Step, regex_problem
from triton_release.models.golden.reader import ReadCase, load_case, read_case
from triton_release.models.tensors import FLOATS, Tensor, element_index

__all__ = [
    "DEFAULT_TIMEOUT",
    "FLOATS",
    "ExpectedError",
    "GoldenCase",
    "Step",
    "Tensor",
    "case_warnings",
    "check_against_config",
    "element_index",
    "iterative_model",
    "load_case",
    "read_case",
    "ReadCase",
    "regex_problem",
    "sequence_model",
]
