"""The JSON report as the tests read it: every report is checked against the published schema
(src/triton_release/report.schema.json) before a test looks into it.

`checked_reports` (an autouse fixture in tests/conftest.py) checks every report the tool makes in
the test's own process, as it is made; `read_report` and `parse_report` check the ones a tool
run in another process (a subprocess, the action under act) wrote to a file or printed.
"""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator

from triton_release.session import report_schema

Draft202012Validator.check_schema(report_schema())
VALIDATOR = Draft202012Validator(report_schema())


class ReportInvalid(AssertionError):
    pass


def check_report(data: object) -> dict:
    """`data`, once it is known to follow the schema; else an assertion naming every violation."""
    errors = sorted(VALIDATOR.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        found = "\n".join(f"- at /{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors[:20])
        raise ReportInvalid(f"the report does not follow report.schema.json:\n{found}")
    assert isinstance(data, dict)
    return data


def parse_report(text: str) -> dict:
    return check_report(json.loads(text))


def read_report(path: Path | str) -> dict:
    return parse_report(Path(path).read_text())
