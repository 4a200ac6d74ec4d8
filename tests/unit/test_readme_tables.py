"""The README's tables of the action's inputs and outputs are action.yml's: the same names, the
same defaults, the same descriptions."""

from __future__ import annotations

import re

import pytest
import yaml

from support.stack import ROOT

ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
README = (ROOT / "README.md").read_text(encoding="utf-8")


def cells(line: str) -> list[str]:
    """A Markdown table row's cells, split on pipes that are not escaped."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", inner)]


def tables(text: str) -> list[list[list[str]]]:
    """Every table of a Markdown page: its rows (the header first, the --- row left out)."""
    found, rows = [], []
    for line in text.split("\n") + [""]:
        if line.lstrip().startswith("|"):
            row = cells(line)
            if not all(re.fullmatch(r":?-{3,}:?", cell) for cell in row):
                rows.append(row)
        elif rows:
            found.append(rows)
            rows = []
    return found


def table(first_header: str) -> dict[str, list[str]]:
    """The README's table whose first column is `first_header`: name -> the other cells."""
    matches = [t for t in tables(README) if t[0][0].lower() == first_header]
    assert len(matches) == 1, f"the README should hold one table headed `| {first_header} | ...`, not {len(matches)}"
    header, *rows = matches[0]
    named = {}
    for row in rows:
        assert len(row) == len(header), f"README table row {row} has {len(row)} cells, not {len(header)}"
        name = row[0].strip("`")
        assert name not in named, f"the README's {first_header} table names `{name}` twice"
        named[name] = row[1:]
    return named


def plain(text: object) -> str:
    return " ".join(str(text).split())


def default_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def unquoted(cell: str) -> str:
    return cell[1:-1] if len(cell) >= 2 and cell.startswith("`") and cell.endswith("`") else cell


INPUTS, OUTPUTS = table("input"), table("output")


def test_the_tables_have_the_columns_of_action_yml():
    [inputs] = [t for t in tables(README) if t[0][0].lower() == "input"]
    [outputs] = [t for t in tables(README) if t[0][0].lower() == "output"]
    assert [c.lower() for c in inputs[0]] == ["input", "default", "description"]
    assert [c.lower() for c in outputs[0]] == ["output", "description"]


def test_the_inputs_table_names_every_input_of_action_yml_and_no_other():
    declared, listed = set(ACTION["inputs"]), set(INPUTS)
    assert listed == declared, (
        f"README inputs missing from action.yml: {sorted(listed - declared)}; "
        f"action.yml inputs missing from the README: {sorted(declared - listed)}"
    )


def test_the_outputs_table_names_every_output_of_action_yml_and_no_other():
    declared, listed = set(ACTION["outputs"]), set(OUTPUTS)
    assert listed == declared, (
        f"README outputs missing from action.yml: {sorted(listed - declared)}; "
        f"action.yml outputs missing from the README: {sorted(declared - listed)}"
    )


@pytest.mark.parametrize("name", sorted(ACTION["inputs"]))
def test_each_input_has_action_yml_s_default(name):
    assert name in INPUTS, f"the README's inputs table lacks `{name}`"
    expected = default_text(ACTION["inputs"][name].get("default"))
    assert unquoted(INPUTS[name][0]) == expected, (
        f"input `{name}`: the README's default is {INPUTS[name][0]!r}, action.yml's is {expected!r}"
    )


@pytest.mark.parametrize(
    ("kind", "name"),
    [("inputs", n) for n in sorted(ACTION["inputs"])] + [("outputs", n) for n in sorted(ACTION["outputs"])],
)
def test_each_description_is_action_yml_s(kind, name):
    listed = INPUTS if kind == "inputs" else OUTPUTS
    assert name in listed, f"the README's {kind} table lacks `{name}`"
    expected = plain(ACTION[kind][name].get("description", ""))
    assert plain(listed[name][-1]) == expected, f"{kind[:-1]} `{name}`: the README says {listed[name][-1]!r}"


def test_the_parser_reads_a_table_as_a_reader_does():
    text = (
        "x\n\n| input | default | description |\n| --- | --- | --- |\n| `a` | `1` | one \\| two |\n| `b` |  | none |\n"
    )
    [parsed] = tables(text)
    assert parsed == [["input", "default", "description"], ["`a`", "`1`", "one | two"], ["`b`", "", "none"]]
