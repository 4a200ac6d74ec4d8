"""The JSON report's published schema (src/triton_release/report.schema.json, docs/report.md):
every report carries `schema_version` and the same top-level keys whatever the command or mode
(null where absent), usage errors give a report too, and the schema is strict at the top level
and open below it. Every report the tests make is checked against it (tests/conftest.py)."""

from __future__ import annotations

import json

import pytest

from support.models import python_model_files, write_tree
from support.reports import ReportInvalid, check_report, parse_report
from triton_release.cli import main
from triton_release.session import Report, StepRecord, report_keys, report_schema

TOP_LEVEL = [
    "schema_version",
    "command",
    "ok",
    "error",
    "version",
    "released",
    "image",
    "digest",
    "changed_models",
    "environment_changed_models",
    "previous_version",
    "previous_digest",
    "candidate",
    "shards",
    "evidence",
    "evidence_signed",
    "evidence_verified",
    "log_file",
    "steps",
]
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def models(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path / "model_repository", python_model_files("a"))
    return {"HOME": str(tmp_path)}


def stdout_report(capsys) -> dict:
    return parse_report(capsys.readouterr().out)


def test_every_report_has_the_schemas_top_level_keys_in_order_null_where_absent(models, capsys):
    assert main(["validate", "--json"], env=models) == 0
    report = stdout_report(capsys)
    assert list(report) == TOP_LEVEL == list(report_keys())
    assert report["schema_version"] == 1 and report["command"] == "validate" and report["ok"] is True
    assert report["image"] is None and report["digest"] is None and report["error"] is None  # null, not absent
    assert report["released"] is None and report["log_file"] is None and report["steps"]["validate"]["ok"] is True


def test_a_pushed_release_and_a_failed_one_fill_the_same_keys():
    pushed = Report("release")
    pushed.facts.update({"version": "1.2.0", "image": "127.0.0.1:5000/m:1.2.0", "digest": DIGEST, "released": True})
    pushed.record("push", StepRecord(None, 1.5, True))
    not_pushed = Report("release", facts={"version": "1.2.0", "released": False, "changed_models": ["a"]})
    for report in (pushed.to_json(), not_pushed.to_json()):
        assert list(check_report(report)) == TOP_LEVEL
    assert not_pushed.to_json()["image"] is None and not_pushed.to_json()["digest"] is None


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["release", "--json", "--keep"], "release"),  # --keep without its value
        (["--json", "no-such-command"], None),
        (["--json"], None),
        (["validate", "--json", "--no-such-flag"], "validate"),
    ],
)
def test_a_usage_error_with_json_prints_a_report_with_the_error(models, capsys, argv, command):
    assert main(argv, env=models) == 2
    captured = capsys.readouterr()
    report = parse_report(captured.out)  # stdout holds the report alone; the message is on stderr
    assert report["ok"] is False and report["command"] == command and report["steps"] == {}
    assert report["error"]["exit_code"] == 2 and "--help" in report["error"]["message"]
    assert report["error"]["message"].split(".")[0] in captured.err


def test_a_usage_error_is_written_to_the_report_file_too(models, tmp_path, capsys):
    assert main(["release", "--report", "r.json", "--no-such-flag"], env=models) == 2
    report = parse_report((tmp_path / "r.json").read_text())
    assert report["error"]["exit_code"] == 2 and "--no-such-flag" in report["error"]["message"]
    assert capsys.readouterr().out == ""  # without --json, nothing on stdout but the human lines


def test_without_json_a_usage_error_prints_no_report(models, capsys):
    assert main(["release", "--no-such-flag"], env=models) == 2
    assert "{" not in capsys.readouterr().out


def test_the_schema_is_strict_at_the_top_level_and_open_below_it():
    report = Report("release", facts={"version": "1.0.0"})
    report.record("build", StepRecord(None, 0.5, True))
    good = report.to_json()
    good["steps"]["build"]["anything"] = {"nested": [1, "two"]}  # a step's result may hold any keys
    check_report(good)
    for broken in (
        {**good, "surprise": 1},  # an undocumented top-level key
        {k: v for k, v in good.items() if k != "image"},  # a key left out instead of null
        {**good, "schema_version": 2},
        {**good, "digest": "not-a-digest"},
        {**good, "steps": {"build": {"ok": True}}},  # a step without its time
    ):
        with pytest.raises(ReportInvalid):
            check_report(broken)


def test_every_report_made_in_a_tests_process_is_checked_as_it_is_made():
    report = Report("release", facts={"surprise": 1})  # a fact the schema does not name is kept ...
    with pytest.raises(ReportInvalid, match="'surprise' was unexpected"):  # ... and fails the tests
        report.to_json()


def test_the_schema_and_the_report_page_describe_every_top_level_key():
    from docs import gen

    schema = report_schema()
    assert schema["additionalProperties"] is False and schema["required"] == list(schema["properties"])
    assert all(schema["properties"][key].get("description") for key in TOP_LEVEL)
    page = gen.pages()["docs/report.md"]
    for key in TOP_LEVEL:
        assert f"| `{key}` |" in page, key
    assert json.loads(gen.ROOT.joinpath("src/triton_release/report.schema.json").read_text()) == schema
