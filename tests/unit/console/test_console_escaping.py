"""Model text is shown, never obeyed: a model's error message with terminal escape sequences, a
carriage return or line feeds cannot draw a green PASS, rewrite a line or add one; in Actions no
line of it becomes a workflow command (the runner strips leading white space before it looks for
'::', and finds the older '##[' anywhere in a line); the step summary holds no control character."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace as NS

from triton_release.action.summary import summary
from triton_release.console import Console
from triton_release.models.inference import CaseResult
from triton_release.models.suite import GoldenRun
from triton_release.session import Report, StepRecord

GREEN_PASS = "\x1b[32mPASS\x1b[0m"
HOSTILE = (
    f"bad input\r{GREEN_PASS} a/forged (0.1 ms)\nPASS a/forged (0.2 ms)\n::error::owned\n"
    "\t  ::set-output name=version::9.9.9\n::stop-commands::tok\nsee ##[set-output name=digest;]x\x9b2J\x85\x07"
)
CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def failing_run(message: str = HOSTILE) -> GoldenRun:
    bad = CaseResult("a/evil", "model_repository/a/golden/evil.json", False, 1.0, (), f"inference failed: {message}")
    good = CaseResult("a/fine", "model_repository/a/golden/fine.json", True, 1.0, ())
    return GoldenRun("img", ("a",), (good, bad), ())


def printed(ci: bool, run: GoldenRun | None = None) -> list[str]:
    out = io.StringIO()
    Console(out=out, err=out, ci=ci).golden_run(run or failing_run())
    return out.getvalue().split("\n")


def runner_command(line: str) -> bool:
    """Whether the Actions runner would obey `line`: as the runner parses it (ActionCommand's
    TryParseV2 after TrimStart, TryParse for '##[' anywhere)."""
    return line.lstrip().startswith("::") or "##[" in line


def test_no_control_character_of_a_model_reaches_the_terminal():
    lines = printed(ci=False)
    text = "\n".join(lines)
    assert "\x1b" not in text and "\r" not in text and "\x9b" not in text and "\x85" not in text
    assert not any(CONTROL.search(line) for line in lines)
    assert [line.split(" (")[0] for line in lines if line.startswith(("PASS", "FAIL"))] == [
        "PASS a/fine",
        "FAIL a/evil",
    ]
    fail = next(line for line in lines if line.startswith("FAIL a/evil"))
    assert "bad input\\r\\x1b[32mPASS\\x1b[0m a/forged (0.1 ms)\\nPASS a/forged" in fail  # shown, escaped


def test_in_actions_no_line_of_model_text_becomes_a_workflow_command():
    lines = printed(ci=True)
    commands = [line for line in lines if runner_command(line)]
    [annotation] = commands  # the console's own annotation of the failed case, nothing else
    assert annotation.startswith("::error file=model_repository/a/golden/evil.json::a/evil: inference failed: ")
    assert "\n" not in annotation and "set-output" in annotation  # the message, escaped, inside the annotation
    assert not any(CONTROL.search(line) for line in lines)
    fail = next(line for line in lines if line.startswith("FAIL a/evil"))  # one line: its line feeds escaped
    assert "\\n::error::owned\\n\t  ::set-output name=version::9.9.9\\n" in fail
    assert "see #\\x23[set-output name=digest;]x" in fail


def test_plain_lines_of_user_text_are_defused_line_by_line():
    out = io.StringIO()
    console = Console(out=out, err=out, ci=True)
    console.line("a/x: fine\n  ::warning::forged\r::error::forged too\n##[group]hidden")
    console.warning("model said\n\t::add-mask::nothing")
    lines = out.getvalue().split("\n")
    assert [line for line in lines if runner_command(line)] == ["::warning::model said%0A\t::add-mask::nothing"]
    assert "  \\x3a:warning::forged\\r::error::forged too" in lines


def test_the_escaping_functions():
    from triton_release.console import defuse_commands, escape_controls

    assert escape_controls("a\x1b[2Jb\rc\nd\te\x7f\x9b") == "a\\x1b[2Jb\\rc\\nd\te\\x7f\\x9b"
    assert escape_controls("one\ntwo\r", lines=True) == "one\ntwo\\r"
    assert escape_controls("é ü 中 ok") == "é ü 中 ok"  # printable text stays as it is
    assert defuse_commands("::error::x") == "\\x3a:error::x"
    assert defuse_commands(" \u00a0::debug::x") == " \u00a0\\x3a:debug::x"
    assert defuse_commands("a ::error:: in the middle") == "a ::error:: in the middle"
    assert defuse_commands("x ##[error]y") == "x #\\x23[error]y"


def test_the_step_summary_holds_no_control_character_of_a_model():
    report = Report("release")
    report.steps["test"] = StepRecord(NS(cases=failing_run().cases), 0.1, True)
    text = summary(report)
    assert not CONTROL.search(text.replace("\n", ""))
    row = next(line for line in text.splitlines() if line.startswith("| `a/evil` |"))
    assert "bad input\\\\r\\\\x1b\\[32mPASS" in row  # escaped, then made Markdown (\\ and \[ render as \ and [)
