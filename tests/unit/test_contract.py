"""Every tag family the tool owns (contract.py) is refused as a channel before any step, and the
makers of each family's tags are recognised by their own family."""

from __future__ import annotations

import pytest

from triton_release import contract
from triton_release.cli.main import main
from triton_release.errors import UsageError
from triton_release.history.releases import check_channel

OWNED = {
    "release": "1.4.0",
    "moving version": "1.4",
    "provenance": "sha-0123456789ab",
    "candidate": contract.candidate_tag("0123456789abcdef"),
    "local build": contract.CANDIDATE_TAG,
    "shard result or release evidence": contract.shard_result_tag("sha256:" + "a" * 64, "shard-1"),
    "ledger": contract.LEDGER_TAG,
    "rollback record": contract.rollback_tag("latest"),
}


def test_every_family_has_an_example_here():
    assert set(OWNED) == set(contract.FAMILIES)


@pytest.mark.parametrize(("family", "tag"), sorted(OWNED.items()))
def test_a_tag_the_tool_owns_is_refused_as_a_channel_naming_its_family(family, tag):
    assert contract.owned_family(tag) == family
    with pytest.raises(UsageError, match=f"tag of triton-release's own \\({family}"):
        check_channel(tag)


@pytest.mark.parametrize("tag", ["sha256-" + "b" * 64 + ".att", "sha256-" + "b" * 64, "1.02.3", "7"])
def test_look_alikes_of_owned_families_are_refused_too(tag):
    with pytest.raises(UsageError):
        check_channel(tag)


@pytest.mark.parametrize("channel", ["latest", "stable", "prod", "canary-eu", "v2"])
def test_ordinary_channels_pass(channel):
    assert check_channel(channel) == channel


def test_release_refuses_such_a_channel_before_any_step(git_repo, monkeypatch, capsys):
    monkeypatch.chdir(git_repo.root)
    code = main(["release", "--to", "127.0.0.1:5000/t/m", "--channel", "candidate-0123456789ab", "--no-push"])
    assert code == 2
    assert "candidate" in capsys.readouterr().err
