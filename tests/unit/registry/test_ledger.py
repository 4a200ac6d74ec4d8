"""The ledger, append-only (registry/ledger.py): one tag per entry, never rewritten, read back as
the union of every entry's; the single tag of old still read; a build confirmed only by the whole
manifest its push recorded."""

from __future__ import annotations

import pytest

from support.registries import MemoryRegistry
from triton_release import contract
from triton_release.contract import LEDGER_TAG, REVISION_LABEL
from triton_release.errors import Refused, UsageError
from triton_release.history.releases import check_channel
from triton_release.registry import ledger
from triton_release.registry.ledger import Ledger, check_built_here, read_ledger, write_entry


def _push(registry: MemoryRegistry, version: str, commit: str, *, manifest_known: bool = True, confirm: bool = True):
    """X.Y.Z pushed as `push` does it: the build entered, its manifest put, then confirmed."""
    image = registry.image({REVISION_LABEL: commit}, layer=version + commit)
    ledger.intend(registry, version, commit, image.config_digest, image.digest if manifest_known else "")
    registry.put_manifest(version, image)
    if confirm:
        ledger.enter(registry, version, {REVISION_LABEL: commit}, image.config_digest, image.digest)
    return image


def _entries(registry: MemoryRegistry) -> list[str]:
    return [t for t in registry.tags() if contract.is_ledger_tag(t)]


def test_each_push_adds_its_own_entries_and_rewrites_no_tag():
    registry = MemoryRegistry(write_once=True)  # a rewrite would be refused
    first = _push(registry, "1.0.0", "a" * 40)
    second = _push(registry, "1.1.0", "b" * 40)
    assert _entries(registry) == sorted(
        [
            contract.ledger_entry_tag("1.0.0", "entered", first.config_digest),
            contract.ledger_entry_tag("1.0.0", "confirmed", first.digest),
            contract.ledger_entry_tag("1.1.0", "entered", second.config_digest),
            contract.ledger_entry_tag("1.1.0", "confirmed", second.digest),
        ]
    )
    found = read_ledger(registry)
    assert found.releases == {"1.0.0": "a" * 40, "1.1.0": "b" * 40}
    assert found.entries["1.1.0"].digest == second.digest and found.entries["1.1.0"].manifest == second.digest
    ledger.enter(registry, "1.1.0", {REVISION_LABEL: "b" * 40}, second.config_digest, second.digest)  # again: nothing


def test_a_read_takes_the_newest_entry_which_covers_the_others():
    registry = MemoryRegistry()
    for number in range(5):
        _push(registry, f"1.{number}.0", f"{number}" * 40)
    registry.reads.clear()
    assert len(read_ledger(registry).releases) == 5
    newest = ledger.ledger_tags(registry.tags())[0]
    assert registry.reads == [newest] and newest.startswith("triton-release.ledger.1.4.0.confirmed-")  # one read


def test_two_releases_at_once_each_keep_their_entry():
    """Each writer read the ledger before the other wrote: with one rewritten tag the last write lost
    the other's entry; with a tag each, the union holds both."""
    registry = MemoryRegistry()
    _push(registry, "1.0.0", "a" * 40)
    before = read_ledger(registry)
    one = registry.image({REVISION_LABEL: "b" * 40}, layer="one")
    two = registry.image({REVISION_LABEL: "c" * 40}, layer="two")
    write_entry(
        registry,
        contract.ledger_entry_tag("1.1.0", "confirmed", one.digest),
        before.confirming("1.1.0", "b" * 40, one.config_digest, one.digest, {"m": {1: "t1"}}),
    )
    write_entry(
        registry,
        contract.ledger_entry_tag("2.0.0", "confirmed", two.digest),
        before.confirming("2.0.0", "c" * 40, two.config_digest, two.digest, {"n": {1: "t2"}}),
    )
    found = read_ledger(registry)
    assert set(found.releases) == {"1.0.0", "1.1.0", "2.0.0"} and found.versions == {"m": {1: "t1"}, "n": {1: "t2"}}


def test_the_single_ledger_tag_of_old_is_read_and_the_next_entry_covers_it():
    registry = MemoryRegistry()
    old = Ledger().confirming("1.0.0", "a" * 40, "sha256:" + "1" * 64, "sha256:" + "2" * 64, {"m": {1: "t1"}})
    write_entry(registry, LEDGER_TAG, old)
    assert read_ledger(registry).releases == {"1.0.0": "a" * 40}
    _push(registry, "1.1.0", "b" * 40)
    registry.reads.clear()
    found = read_ledger(registry)
    assert found.releases == {"1.0.0": "a" * 40, "1.1.0": "b" * 40} and found.versions == {"m": {1: "t1"}}
    assert LEDGER_TAG not in registry.reads and LEDGER_TAG in registry.tags()  # kept as it was, not read again


def test_an_entry_claiming_to_cover_another_it_lacks_does_not_hide_it():
    registry = MemoryRegistry()
    _push(registry, "1.0.0", "a" * 40)
    hidden = _entries(registry)
    forged = Ledger(covers=frozenset(hidden)).intending("1.0.1", "f" * 40, "sha256:" + "0" * 64)
    write_entry(registry, contract.ledger_entry_tag("1.0.1", "entered", "sha256:" + "0" * 64), forged)
    assert "1.0.0" in read_ledger(registry).releases  # its tag says it was confirmed: read it


def test_an_entry_not_holding_what_its_tag_names_is_refused():
    registry = MemoryRegistry()
    write_entry(registry, contract.ledger_entry_tag("1.0.0", "confirmed", "sha256:" + "3" * 64), Ledger())
    with pytest.raises(Refused, match="does not hold the entry its tag names"):
        read_ledger(registry)


def test_confirmed_means_the_whole_manifest_the_push_recorded_not_its_config():
    """A push stopped between its put and its confirmation: the manifest under X.Y.Z must be the
    one it entered, not any with the same image configuration and other layers (#48 item 3)."""
    registry = MemoryRegistry()
    commit = "a" * 40
    ours = _push(registry, "1.0.0", commit, confirm=False)
    same_config = MemoryRegistry.image(registry, {REVISION_LABEL: commit}, layer="foreign")
    assert same_config.config_digest == ours.config_digest and same_config.digest != ours.digest
    with pytest.raises(Refused, match="the same configuration, other layers"):
        check_built_here(registry, "1.0.0", same_config.digest, commit)
    assert "1.0.0" not in read_ledger(registry).releases
    check_built_here(registry, "1.0.0", ours.digest, commit)  # the one it entered: proven, and confirmed
    assert read_ledger(registry).entries["1.0.0"].digest == ours.digest


def test_a_daemon_push_entered_without_its_manifest_is_proven_by_its_build():
    registry = MemoryRegistry()
    ours = _push(registry, "1.0.0", "a" * 40, manifest_known=False, confirm=False)
    check_built_here(registry, "1.0.0", ours.digest, "a" * 40)
    assert read_ledger(registry).releases == {"1.0.0": "a" * 40}


def test_racing_entries_of_one_version_are_each_found_by_their_build():
    registry = MemoryRegistry()
    rival = registry.image({REVISION_LABEL: "b" * 40}, layer="rival")
    ledger.intend(registry, "1.0.0", "b" * 40, rival.config_digest, rival.digest)  # lost the race later
    ours = _push(registry, "1.0.0", "a" * 40, confirm=False)  # won it, then stopped
    check_built_here(registry, "1.0.0", ours.digest, "a" * 40)
    assert read_ledger(registry).releases == {"1.0.0": "a" * 40}


@pytest.mark.parametrize(
    "tag",
    [LEDGER_TAG, "triton-release.ledger.1.0.0.confirmed-0123456789ab", "triton-release.ledger.x"],
)
def test_the_ledger_s_tags_are_never_a_channel(tag):
    with pytest.raises(UsageError, match="ledger"):
        check_channel(tag)


def test_an_entry_tag_is_parsed_back():
    tag = contract.ledger_entry_tag("1.2.3", "entered", "sha256:" + "ab" * 32)
    assert tag == "triton-release.ledger.1.2.3.entered-abababababab" and contract.is_tag(tag)
    assert contract.parse_ledger_entry_tag(tag) == ("1.2.3", "entered", "abababababab")
    assert contract.parse_ledger_entry_tag(LEDGER_TAG) is None
    assert contract.parse_ledger_entry_tag("triton-release.ledger.01.2.3.entered-abababababab") is None
