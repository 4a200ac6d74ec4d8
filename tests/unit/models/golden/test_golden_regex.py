"""An expected error's regex cannot hang a release: patterns are matched by RE2, in time linear
in the message whatever the pattern, and validate refuses, naming the golden file, the patterns
RE2 cannot run (backreferences, lookaround, repetitions beyond its limit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.models import golden_case, python_model_files, write_tree
from support.stack import ROOT
from triton_release.models import golden
from triton_release.models.validate import validate

INPUTS = json.loads(golden_case())["inputs"]
SOURCE = str(Path(golden.__file__).parents[2])  # the package under test, for a child process


def error_case(tmp_path, pattern: str):
    path = tmp_path / "m" / "golden" / "case.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"inputs": INPUTS, "error": {"regex": pattern}}, indent=2)
    path.write_text(text)
    return path, text


def test_a_catastrophic_regex_against_a_hostile_message_answers_at_once(tmp_path):
    """(a+)+$ against 34 a's and a '!' takes a backtracking engine about 2**34 steps. Run in a
    child process, so that an engine that hangs is killed at the deadline, not the test run."""
    path, _ = error_case(tmp_path, "(a+)+$")
    script = textwrap.dedent(f"""\
        from pathlib import Path
        from triton_release.models import answers, golden
        case, problems = golden.load_case(Path({str(path)!r}), "m")
        assert not problems, problems
        print(answers.compare_error(case.error, "a" * 34 + "!", []))
        print(case.error.matches("x" * 100_000 + "a" * 5_000 + "!"), case.error.matches("aaaa"))
        """)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": SOURCE},
        )
    except subprocess.TimeoutExpired:
        pytest.fail("matching (a+)+$ against 'a' * 34 + '!' did not finish within 30 s")
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("(False, 'expected an error matching /(a+)+$/, got another error: aaaa")
    assert second == "False True"


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"negative input -\d+$", True),
        (r"(?i)NEGATIVE input", True),
        (r"^negative", False),
        (r"model '[^']+', message: TritonModelException", True),
        (r"(?P<value>-\d+): amounts", False),
        (r"input (?P<value>-\d+)$", True),
    ],
)
def test_ordinary_patterns_match_as_before(pattern, expected):
    message = "Failed to process the request(s) for model 'm_0', message: TritonModelException: negative input -3"
    assert golden.ExpectedError(pattern=pattern).matches(message) is expected


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(a)\1", "invalid escape sequence"),
        (r"negative(?= input)", "invalid perl operator"),
        (r"(?<=model )'m_0'", "invalid perl operator"),
        (r"(?:a{1000}){1000}", "invalid repetition size"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_naming_the_file_and_line(tmp_path, pattern, why):
    path, text = error_case(tmp_path, pattern)
    case, problems = golden.load_case(path, "m")
    assert case is None and len(problems) == 1
    [problem] = problems
    assert problem.path == path and problem.line == text.count("\n", 0, text.index('"error"')) + 1
    assert f"the regex {pattern!r} is refused ({why}" in problem.message
    assert "RE2" in problem.message and "Rewrite the pattern" in problem.message


def test_validate_refuses_the_golden_file_whose_regex_could_backtrack(tmp_path):
    root = write_tree(tmp_path / "model_repository", python_model_files("m"))
    (root / "m" / "golden" / "refused.json").write_text(json.dumps({"inputs": INPUTS, "error": {"regex": r"(x+)\1$"}}))
    result = validate(root)
    [problem] = result.problems
    assert problem.path.name == "refused.json" and "m/golden/refused.json" in str(problem)
    assert "is refused" in problem.message


def test_a_pattern_that_does_not_compile_still_says_so():
    assert golden.regex_problem("negative (").startswith("does not compile (")
    assert golden.regex_problem(r"negative input -\d+") is None
