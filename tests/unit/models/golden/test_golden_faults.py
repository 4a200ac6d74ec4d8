"""Hostile golden files and settings, found without a server: deep nesting, integers out of
range, cases without outputs, binary BYTES, a version_policy that hides the newest version,
timeouts, and the server container's limits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from support.models import golden_case, python_config, write_tree
from triton_release.errors import UsageError
from triton_release.models import answers, golden
from triton_release.models.repository import Repository, load_model
from triton_release.models.validate import check_version_policy
from triton_release.server import container


def load(tmp_path, text: str, model: str = "m"):
    path = tmp_path / "m" / "golden" / "case.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return golden.load_case(path, model)


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


# -- 2. deep nesting ----------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [900, 5000, 100_000])
def test_data_nested_thousands_deep_is_a_problem_naming_the_file(tmp_path, depth):
    text = (
        '{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": '
        + nested(depth)
        + '}], "outputs": []}'
    )
    case, problems = load(tmp_path, text)
    assert case is None and len(problems) == 1
    assert problems[0].path.name == "case.json" and "nested" in problems[0].message


def test_data_nested_a_few_levels_still_loads(tmp_path):
    case, problems = load(tmp_path, golden_case(shape=(1, 2, 2), data=[[[1, 2], [3, 4]]], out=[[[2, 3], [4, 5]]]))
    assert not problems and case.inputs[0].data == (1, 2, 3, 4)


# -- 3. integers out of their type's range -----------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        ("UINT8", 256),
        ("UINT8", -1),
        ("INT8", 128),
        ("INT16", -32769),
        ("UINT16", 65536),
        ("INT32", 2**31),
        ("UINT32", -1),
        ("INT64", 2**63),
        ("UINT64", 2**64),
    ],
)
def test_an_integer_outside_its_type_is_a_problem_naming_the_tensor(tmp_path, dtype, value):
    case, problems = load(tmp_path, golden_case(data=(1, 2, value, 4), dtype=dtype))
    assert case is None
    assert len(problems) == 1 and "'INPUT0'" in problems[0].message and str(value) in problems[0].message
    assert dtype in problems[0].message and problems[0].line


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [("UINT8", 0, 255), ("INT8", -128, 127), ("INT64", -(2**63), 2**63 - 1), ("UINT64", 0, 2**64 - 1)],
)
def test_integers_at_the_ends_of_their_range_load_and_convert(tmp_path, dtype, low, high):
    case, problems = load(tmp_path, golden_case(data=(low, high, low, high), out=(low, high, low, high), dtype=dtype))
    assert not problems
    assert case.inputs[0].array().tolist() == [[low, high, low, high]]


def test_bool_data_must_be_true_or_false(tmp_path):
    case, problems = load(tmp_path, golden_case(data=(True, False, 2, True), out=(True,) * 4, dtype="BOOL"))
    assert case is None and "'INPUT0'" in problems[0].message and "BOOL" in problems[0].message


def test_a_float_beyond_its_type_is_a_problem(tmp_path):
    case, problems = load(tmp_path, golden_case(data=(1, 2, 70000, 4), dtype="FP16"))
    assert case is None and "FP16" in problems[0].message and "70000" in problems[0].message


# -- 4. cases without outputs -------------------------------------------------------------------


def model_with_case(tmp_path, case_text: str):
    write_tree(
        tmp_path / "repo", {"m/config.pbtxt": python_config("m"), "m/1/model.py": "", "m/golden/case.json": case_text}
    )
    model = load_model(tmp_path / "repo" / "m")
    case, problems = golden.load_case(model.golden_cases[0], "m")
    assert not problems
    return case, model


@pytest.mark.parametrize("outputs", [None, []])
def test_a_case_without_outputs_is_warned_about(tmp_path, outputs):
    raw = json.loads(golden_case())
    if outputs is None:
        del raw["outputs"]
    else:
        raw["outputs"] = outputs
    case, model = model_with_case(tmp_path, json.dumps(raw))
    warnings = golden.case_warnings(case, model)
    assert len(warnings) == 1 and warnings[0].path == case.path
    assert "proves only that the model answers" in warnings[0].message and "record" in warnings[0].message


def test_a_case_with_outputs_has_no_warning(tmp_path):
    case, model = model_with_case(tmp_path, golden_case())
    assert golden.case_warnings(case, model) == []


# -- 5. BYTES that are not UTF-8 ----------------------------------------------------------------


def test_record_writes_binary_bytes_as_base64_and_the_case_then_passes(tmp_path):
    answer = np.array([b"\xff\xfe\x00binary", "caf\u00e9".encode(), b""], dtype=np.object_).reshape(1, 3)
    written = answers.tensor_json("OUT", answer, "BYTES")
    assert written["data"] == [{"b64": "//4AYmluYXJ5"}, "caf\u00e9", ""]
    text = json.dumps(
        {
            "inputs": [{"name": "IN", "datatype": "BYTES", "shape": [1], "data": [{"b64": "/w=="}]}],
            "outputs": [written],
        },
        ensure_ascii=False,
    )
    case, problems = load(tmp_path, text)
    assert not problems, problems
    assert case.inputs[0].array().tolist() == [b"\xff"]
    result = answers.compare(case.outputs[0], answer, "BYTES", 0, 0)
    assert result.passed, result.message
    other = np.array([b"\xff\xfe\x00binarY", "caf\u00e9".encode(), b""], dtype=np.object_).reshape(1, 3)
    failed = answers.compare(case.outputs[0], other, "BYTES", 0, 0)
    assert not failed.passed and "\\xff\\xfe" in failed.message


@pytest.mark.parametrize(
    "element", [{"b64": "not base64!"}, {"b64": 3}, {"b64": "AA==", "x": 1}, {"hex": "00"}, "\ud800"]
)
def test_a_bytes_element_that_cannot_be_sent_is_a_problem(tmp_path, element):
    text = json.dumps({"inputs": [{"name": "IN", "datatype": "BYTES", "shape": [1], "data": [element]}]})
    case, problems = load(tmp_path, text)
    assert case is None and "'IN'" in problems[0].message and "b64" in problems[0].message


# -- 1. the per-case timeout --------------------------------------------------------------------


def test_timeout_is_a_case_key_with_a_default(tmp_path):
    case, problems = load(tmp_path, golden_case(timeout=2.5))
    assert not problems and case.timeout == 2.5
    case, _ = load(tmp_path, golden_case())
    assert case.timeout == golden.DEFAULT_TIMEOUT == 60


@pytest.mark.parametrize("value", [0, -1, "10", True, None, 1e9])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_a_problem(tmp_path, value):
    case, problems = load(tmp_path, golden_case(timeout=value))
    assert case is None and '"timeout"' in problems[0].message and problems[0].line


# -- 8. a version_policy that hides the newest version ------------------------------------------

POLICY_CONFIG = python_config("m") + "version_policy: { specific: { versions: [ 1 ] } }\n"


@pytest.mark.parametrize(
    ("config", "versions", "bad"),
    [
        (POLICY_CONFIG, ("1", "2"), True),
        (POLICY_CONFIG, ("1",), False),
        (python_config("m") + "version_policy: { specific: { versions: [ 1, 2 ] } }\n", ("1", "2"), False),
        (python_config("m") + "version_policy: { latest: { num_versions: 1 } }\n", ("1", "2"), False),
        (python_config("m") + "version_policy: { all: { } }\n", ("1", "2"), False),
        (python_config("m"), ("1", "2"), False),
    ],
)
def test_a_version_policy_excluding_the_newest_version_is_a_problem(tmp_path, config, versions, bad):
    write_tree(tmp_path / "repo", {"m/config.pbtxt": config, **{f"m/{v}/model.py": "" for v in versions}})
    repo = Repository.load(tmp_path / "repo")
    found = list(check_version_policy(repo["m"], repo))
    problem = found[0] if found else None
    if not bad:
        assert problem is None
        return
    assert problem.path.name == "config.pbtxt" and problem.line == 6
    assert "version_policy" in problem.message and "version 2" in problem.message


# -- 6, 7. the server container's log, memory and process limits --------------------------------

MEMINFO = "MemTotal:       16000000 kB\nMemFree:        1000 kB\n"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 12_000_000 * 1024),
        ("8g", 8 << 30),
        ("512m", 512 << 20),
        ("1.5G", 3 << 29),
        (2_000_000_000, 2_000_000_000),
        ("123456789", 123456789),
    ],
)
def test_server_memory_limit(value, expected):
    assert container.memory_limit(value, meminfo=MEMINFO) == expected


@pytest.mark.parametrize("value", ["lots", "-1g", "1x", 0, "1k", True])
def test_a_server_memory_that_is_not_a_size_is_a_usage_error(value):
    with pytest.raises(UsageError) as error:
        container.memory_limit(value, meminfo=MEMINFO)
    assert "server_memory" in str(error.value)


def test_the_server_container_gets_memory_pids_and_log_limits():
    triton = container.TritonServer("img", {"m": 1}, memory="2g", pids=100, client=object())
    options = triton.limits()
    assert options["mem_limit"] == options["memswap_limit"] == 2 << 30
    assert options["pids_limit"] == 100
    assert options["log_config"]["Config"]["max-size"]
    with pytest.raises(UsageError):
        container.TritonServer("img", {"m": 1}, pids=0, client=object()).limits()


class FakeContainer:
    def __init__(self, text: bytes) -> None:
        self.text, self.asked = text, []

    def logs(self, **kwargs):
        self.asked.append(kwargs)
        lines = self.text.splitlines(keepends=True)
        return b"".join(lines[-kwargs["tail"] :]) if "tail" in kwargs else self.text


def test_only_a_bounded_tail_of_the_server_log_is_read():
    triton = container.TritonServer("img", {"m": 1}, client=object())
    triton.container = FakeContainer(b"".join(b"line %d " % i + b"x" * 5000 + b"\n" for i in range(100_000)))
    text = triton.logs()
    assert all("tail" in asked for asked in triton.container.asked)
    assert len(text) <= container.LOG_TAIL_BYTES and text.rstrip().endswith("x")
    assert "line 99999 " in text
