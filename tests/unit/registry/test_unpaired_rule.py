"""The rule for a lone half of a credentials pair reads the same in the warning, docs/cli.md and
docs/action.md."""

from __future__ import annotations

from support.stack import ROOT
from triton_release.registry.credentials import UNPAIRED_RULE, half_given, unpaired_credentials


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_warning_and_both_pages_say_the_same_rule():
    warning = half_given("bot", None, ("the action's input username", "the action's input password"))
    assert warning is not None and UNPAIRED_RULE in warning
    for page in ("cli.md", "action.md"):
        assert UNPAIRED_RULE in flat((ROOT / "docs" / page).read_text(encoding="utf-8")), page


def test_a_lone_half_of_the_variables_is_warned_about_too():
    [warning] = unpaired_credentials({"TRITON_RELEASE_PASSWORD": "x"})
    assert warning.startswith("TRITON_RELEASE_PASSWORD is given without TRITON_RELEASE_USERNAME")
