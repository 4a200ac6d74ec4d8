"""A gate's bound given empty on the command line (`--max-latency-increase ""`, an unset shell
variable) is a usage error, never a gate switched off without a word."""

from __future__ import annotations

import pytest

from triton_release.action.inputs import ActionInputs
from triton_release.cli.main import main, parser
from triton_release.errors import UsageError


@pytest.mark.parametrize("command", ["release", "test"])
def test_an_empty_max_latency_increase_on_the_command_line_is_a_usage_error(command, capsys):
    with pytest.raises(UsageError, match="empty value, which would switch its gate off"):
        parser().parse_args([command, "--max-latency-increase", ""])
    assert main([command, "--max-latency-increase", " "]) == 2
    assert "--max-latency-increase was given an empty value" in capsys.readouterr().err


def test_the_actions_empty_bound_stays_unset():
    assert "max_latency_increase" not in ActionInputs.from_env({"INPUT_MAX-LATENCY-INCREASE": ""}).settings
