"""The generated reference pages (docs/reference/, made by docs/gen.py) are what the code gives:
the argparse parser, the settings table (settings/table.py) and action.yml. A page that differs is stale."""

from __future__ import annotations

import difflib
import importlib.util
import sys

import pytest
import yaml

from support.stack import ROOT
from triton_release.cli.main import parser
from triton_release.settings import DEPRECATED, SETTINGS


def load_generator():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "docs" / "gen.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = load_generator()
PAGES = gen.pages()


@pytest.mark.parametrize("path", sorted(PAGES))
def test_the_committed_page_is_what_the_code_gives(path):
    committed = ROOT / path
    assert committed.is_file(), f"{path} is missing: {gen.REGENERATE}"
    have, want = committed.read_text(encoding="utf-8"), PAGES[path]
    if have != want:
        diff = list(
            difflib.unified_diff(
                have.splitlines(), want.splitlines(), f"{path} (committed)", f"{path} (from the code)", lineterm="", n=1
            )
        )
        shown = "\n".join(diff[:40]) + ("\n..." if len(diff) > 40 else "")
        pytest.fail(f"{path} is stale: {gen.REGENERATE}.\n{shown}", pytrace=False)


def test_the_cli_page_names_every_command_and_flag():
    page = PAGES[gen.CLI_PAGE]
    top = parser()
    for name, command in gen.commands(top).items():
        assert f"## `triton-release {name}`" in page
        for action in command._actions:
            for option in action.option_strings:
                assert option in ("-h", "--help") or f"`{option}`" in page, f"{name} {option}"


def test_the_settings_page_names_every_setting_input_and_output():
    page = PAGES[gen.SETTINGS_PAGE]
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    for setting in SETTINGS:
        assert f"### `{setting.key}`" in page
    for old in DEPRECATED:
        assert f"formerly called `{old}`" in page
    for name in [*action["inputs"], *action["outputs"]]:
        assert f"| `{name}` |" in page, name


def test_a_flag_that_sets_a_setting_shows_its_default_and_links_to_it():
    rows = [line for line in PAGES[gen.CLI_PAGE].splitlines() if line.startswith("| `-")]
    for command in [parser(), *gen.commands(parser()).values()]:
        for action in command._actions:
            key = gen.setting_of(action)
            if key is None:
                continue
            mine = [row for row in rows if row.startswith(f"| `{action.option_strings[0]}` |")]
            default = gen.default_text(gen.BY_KEY[key].default)
            assert mine and all(
                f"(setting [`{key}`](settings.md#{key}))" in row and f"| {default} |" in row for row in mine
            ), action.option_strings[0]


def test_the_check_names_a_stale_page(tmp_path):
    for path, content in PAGES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content, encoding="utf-8")
    assert gen.stale(tmp_path) == []
    (tmp_path / gen.SETTINGS_PAGE).write_text(PAGES[gen.SETTINGS_PAGE].replace("`300`", "`30`"), encoding="utf-8")
    (tmp_path / gen.CLI_PAGE).unlink()
    assert gen.stale(tmp_path) == [gen.CLI_PAGE, gen.SETTINGS_PAGE]


def paragraph(key: str) -> str:
    """The settings page's sentence under `### \\`key\\``."""
    lines = PAGES[gen.SETTINGS_PAGE].splitlines()
    return lines[lines.index(f"### `{key}`") + 2]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
def test_the_values_and_names_a_setting_takes_keep_their_case(setting):
    """`refuse|allow: ...` is shown as `refuse` or `allow`, each a value the setting accepts as
    written; `perf_analyzer rounds ...` starts with `perf_analyzer`, not Perf_analyzer."""
    first = setting.help.split()[0].rstrip(":")
    if first.isalpha() and first.islower():
        assert paragraph(setting.key)[0] == first[0].upper()  # a plain word starts a sentence
        return
    shown = paragraph(setting.key)
    values = first.split("|")
    assert shown.startswith(f"`{values[0]}`"), shown
    for value in values[1:] if len(values) > 1 else ():
        assert f"`{value}`" in shown.split(":")[0], (value, shown)
    for value in values if len(values) > 1 else ():
        assert setting.convert(value) == value, f"the reference shows {value!r}, which {setting.key} refuses"


def test_a_sentence_starting_with_values_or_a_name_is_not_capitalised():
    assert gen.sentence("refuse|allow: pip options") == "`refuse` or `allow`: pip options."
    assert gen.sentence("auto|stock|wheel: the stub") == "`auto`, `stock` or `wheel`: the stub."
    assert gen.sentence("perf_analyzer rounds per version") == "`perf_analyzer` rounds per version."
    assert gen.sentence("the folder holding the models") == "The folder holding the models."
    page = PAGES[gen.SETTINGS_PAGE]
    for wrong in ("Refuse|allow", "Test|require", "Key|keyless", "Off|golden", "Perf_analyzer"):
        assert wrong not in page
