"""docs/settings.md's example triton-release.yaml shows each setting at its default (the table's),
but the two a user must fill in (python, repository): a value copied from it changes nothing it does
not say it changes (it showed latency_rounds: 4 and latency_interval: 300, defaults 10 and 100)."""

from __future__ import annotations

import re

import yaml

from support.stack import ROOT
from triton_release.settings.config_file import _Loader
from triton_release.settings.table import BY_KEY, DEPRECATED

EXAMPLES = {"python", "repository"}  # values to fill in, not defaults


def test_the_settings_example_shows_the_defaults():
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    shown = yaml.load(block.group(1), Loader=_Loader)
    differs = {}
    for key, value in shown.items():
        setting = BY_KEY[DEPRECATED.get(key, key)]
        if setting.key in EXAMPLES:
            continue
        converted = None if value is None else setting.convert(value)
        if converted != setting.default:
            differs[key] = (value, setting.default)
    assert not differs, f"docs/settings.md shows values other than the defaults: {differs}"


def test_the_example_leaves_push_commit_to_each_door():
    """Copied into a file, push_commit: false would switch off the action's push-back (its default
    is true): the example leaves it out, and says why."""
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None and "push_commit" not in yaml.load(block.group(1), Loader=_Loader)
    assert "would switch off the action's push-back" in " ".join(text.split())
    from triton_release.action.inputs import SETTING_DEFAULTS

    assert SETTING_DEFAULTS["push_commit"] is True and BY_KEY["push_commit"].default is False
