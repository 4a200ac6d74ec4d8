"""The ledger: every release this registry repository was ever given, and every version of every
model it ever shipped, kept apart from the release images so that deleting a release (by hand,
or `--keep` with a hand delete) or removing a model never loses what was released.

It is append-only: one tag per entry, never rewritten, so that a write-once (immutable) repository
holds it and two releases at once cannot lose each other's entries. Each push of X.Y.Z adds two:
`triton-release.ledger.X.Y.Z.entered-<12 hex of the build's image configuration>` before X.Y.Z's
manifest is put (the build, its commit, and the manifest's digest where the push knows it before
the put), then `triton-release.ledger.X.Y.Z.confirmed-<12 hex of the manifest>` once X.Y.Z is in
the registry (the manifest, and the record it shipped: history/released_versions.py's model ->
version -> git tree). contract.py names the family.

Each entry is a small OCI artifact (a manifest whose config is JSON of media type LEDGER_TYPE, also
its `artifactType`, and whose one layer is the empty JSON) holding the whole ledger as its writer
read it, its own entry added, and the entry tags it holds (`covers`). The ledger is the union of
every entry tag's: read newest first, an entry another one covers is not read again, so a read is
usually one manifest and one blob; each tag's name says which release it enters or confirms, and
a union lacking one is completed by reading that tag itself. The single tag `triton-release.ledger`
that earlier versions rewrote is read as one more entry (the first new entry covers it).

The next release is numbered after the highest release the ledger or the registry's tags hold, so
an X.Y.Z is never issued twice; and a (model, version) once released is never shipped with other
bytes, re-added models included (history/released_versions.py's reconcile, fed by `versions`).
The ledger comes from outside the process: like the image labels it is proven against git before
it is used (history/released_versions.prove), and an unreadable one is refused, never taken for none.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import semver

from triton_release.contract import (
    LEDGER_TAG,
    is_ledger_tag,
    is_release_tag,
    ledger_entry_tag,
    parse_digest,
    parse_ledger_entry_tag,
)
from triton_release.errors import Refused
from triton_release.registry.client import Manifest, RegistryRepository, artifact_config

LEDGER_TYPE = "application/vnd.triton-release.ledger.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"

Versions = Mapping[str, Mapping[int, str]]  # model -> version -> git tree


@dataclass(frozen=True)
class Entry:
    """One release in the ledger: entered before its manifest is put (`digest` ""), confirmed after."""

    commit: str  # the commit it was built from
    config: str  # the digest of its image configuration: what was built, known before the push
    digest: str = ""  # the manifest its push wrote and read back; "": the push had not confirmed it
    manifest: str = ""  # the manifest the push was about to put, where it knew it before ("": the daemon's)

    def to_json(self) -> dict:
        return {"commit": self.commit, "config": self.config, "digest": self.digest, "manifest": self.manifest}


@dataclass(frozen=True)
class Ledger:
    entries: Mapping[str, Entry] = field(default_factory=dict)  # X.Y.Z -> its entry
    versions: Versions = field(default_factory=dict)  # every version of every model released (confirmed)
    covers: frozenset[str] = frozenset()  # the entry tags whose entries this ledger holds

    @property
    def releases(self) -> dict[str, str]:
        """X.Y.Z -> commit of every release confirmed in the registry: each number issued."""
        return {v: e.commit for v, e in self.entries.items() if e.digest}

    @property
    def newest(self) -> semver.Version | None:
        found = [semver.Version.parse(v) for v in self.releases]
        return max(found) if found else None

    def intending(self, version: str, commit: str, config: str, manifest: str = "") -> Ledger:
        """This ledger with `version` about to be put up (not issued until confirmed)."""
        return replace(self, entries={**self.entries, version: Entry(commit, config, "", manifest)})

    def confirming(self, version: str, commit: str, config: str, digest: str, shipped: Versions) -> Ledger:
        """This ledger with release `version` confirmed and the versions it shipped; refused when it
        would change a version the ledger holds (a released version never changes)."""
        merged = {model: dict(versions) for model, versions in self.versions.items()}
        for model, versions in shipped.items():
            for number, tree in versions.items():
                known = merged.setdefault(model, {}).get(number)
                if known is not None and known != tree:
                    raise Refused(f"""
                        {model} version {number} was released as git tree {known[:12]} (the registry's ledger
                        says so), and release {version} holds it as {tree[:12]}: released versions never change.
                        Nothing more was tagged.""")
                merged[model][number] = tree
        intended = self.entries.get(version)
        manifest = intended.manifest if intended is not None and intended.config == config else ""
        return replace(
            self, entries={**self.entries, version: Entry(commit, config, digest, manifest)}, versions=merged
        )

    def union(self, other: Ledger, where: str) -> Ledger:
        """The entries and versions of both (two entry tags' ledgers); a confirmed entry wins over an
        entered one. Two that disagree on a confirmed release or a released version are refused:
        one of them was rewritten, and neither is trusted (`where`: the tag `other` was read from)."""
        entries = dict(self.entries)
        for version, entry in other.entries.items():
            known = entries.get(version)
            if known is None or (entry.digest and not known.digest):
                entries[version] = entry
            elif entry.digest and known.digest and (entry.digest, entry.commit) != (known.digest, known.commit):
                raise ValueError(
                    f"{where} says {version} is {entry.digest[:19]} from {entry.commit[:12]}, another entry "
                    f"{known.digest[:19]} from {known.commit[:12]}"
                )
        versions = {model: dict(numbers) for model, numbers in self.versions.items()}
        for model, numbers in other.versions.items():
            for number, tree in numbers.items():
                known_tree = versions.setdefault(model, {}).setdefault(number, tree)
                if known_tree != tree:
                    raise ValueError(
                        f"{where} says {model} version {number} is git tree {tree[:12]}, another entry {known_tree[:12]}"
                    )
        return Ledger(entries, versions, self.covers | other.covers)

    def holds(self, tag: str) -> bool:
        """Whether this ledger holds what the entry tag `tag` enters or confirms."""
        parsed = parse_ledger_entry_tag(tag)
        if parsed is None:
            return tag in self.covers
        version, phase, hex12 = parsed
        entry = self.entries.get(version)
        if entry is None:
            return False
        if phase == "confirmed":
            return (parse_digest(entry.digest) or "").startswith(hex12)
        return entry.digest != "" or (parse_digest(entry.config) or "").startswith(hex12)

    def to_json(self) -> dict:
        ordered = sorted(self.entries.items(), key=lambda item: semver.Version.parse(item[0]))
        return {
            "releases": {v: e.to_json() for v, e in ordered},
            "versions": {m: {str(v): t for v, t in sorted(vs.items())} for m, vs in sorted(self.versions.items())},
            "covers": sorted(self.covers),
        }

    @classmethod
    def from_json(cls, data: object) -> Ledger:
        """The ledger `data` holds; ValueError naming what is wrong when it is not one. An entry of
        the single ledger tag of old has no `manifest`, and the ledger no `covers`."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        releases, versions, covers = data.get("releases"), data.get("versions"), data.get("covers", [])
        if not isinstance(releases, dict) or not all(
            isinstance(v, str)
            and is_release_tag(v)
            and isinstance(e, dict)
            and all(isinstance(e.get(k), str) for k in ("commit", "config", "digest"))
            and isinstance(e.get("manifest", ""), str)
            for v, e in releases.items()
        ):
            raise ValueError("'releases' is not an object of X.Y.Z -> {commit, config, digest}")
        if not isinstance(versions, dict) or not all(
            isinstance(vs, dict) and all(str(n).isdigit() and isinstance(t, str) for n, t in vs.items())
            for vs in versions.values()
        ):
            raise ValueError("'versions' is not an object of model -> version -> git tree")
        if not isinstance(covers, list) or not all(isinstance(t, str) and is_ledger_tag(t) for t in covers):
            raise ValueError("'covers' is not a list of the ledger's tags")
        return cls(
            {v: Entry(e["commit"], e["config"], e["digest"], e.get("manifest", "")) for v, e in releases.items()},
            {str(m): {int(n): t for n, t in vs.items()} for m, vs in versions.items()},
            frozenset(covers),
        )


def ledger_tags(tags: Iterable[str]) -> list[str]:
    """The ledger's tags among `tags`, newest first: by release, a confirmation before its entry,
    the single tag of old last (it holds only what came before)."""

    def order(tag: str) -> tuple:
        parsed = parse_ledger_entry_tag(tag)
        if parsed is None:
            return (0, semver.Version(0), 0, tag)
        version, phase, hex12 = parsed
        return (1, semver.Version.parse(version), phase == "confirmed", hex12)

    return sorted(
        (t for t in tags if t == LEDGER_TAG or parse_ledger_entry_tag(t) is not None), key=order, reverse=True
    )


def _unreadable(registry: RegistryRepository, tag: str, why: str) -> Refused:
    return Refused(f"""
        {registry}:{tag}, an entry of the ledger of every release of {registry}, cannot be read ({why}): it
        is not trusted, and nothing was built. Find out who wrote it; triton-release writes one tag per
        entry on every push and never rewrites one.""")


def read_entry(registry: RegistryRepository, tag: str) -> Ledger | None:
    """The ledger the entry tag `tag` holds (the whole ledger as its writer read it, with its own
    entry); None when the tag is gone. Anything else under it is refused."""
    manifest = registry.manifest(tag)
    if manifest is None:
        return None
    try:
        found = Ledger.from_json(json.loads(artifact_config(registry, manifest, LEDGER_TYPE)))
    except ValueError as exc:  # also UnicodeDecodeError
        raise _unreadable(registry, tag, str(exc)) from None
    if not found.holds(tag) and tag != LEDGER_TAG:
        raise _unreadable(registry, tag, "it does not hold the entry its tag names")
    return replace(found, covers=found.covers | {tag})


def read_ledger(registry: RegistryRepository, tags: Iterable[str] | None = None) -> Ledger:
    """The ledger of `registry` (`tags`: its tags, when the caller listed them): the union of its
    entry tags', read newest first and each only when no entry read holds it; an empty one where
    there is none (a repository whose releases all predate it, or none). Anything under a ledger
    tag that is not a readable entry is refused."""
    listed = ledger_tags(registry.tags() if tags is None else tags)
    ledger = Ledger()
    for tag in listed:
        if tag in ledger.covers and ledger.holds(tag):
            continue
        found = read_entry(registry, tag)
        if found is None:  # deleted meanwhile (a hand delete): what the others hold is the ledger
            continue
        try:
            ledger = ledger.union(found, f"{registry}:{tag}")
        except ValueError as exc:
            raise _unreadable(registry, tag, str(exc)) from None
    return ledger


def write_entry(registry: RegistryRepository, tag: str, ledger: Ledger) -> None:
    """Write `ledger` under the new entry tag `tag`: once; a tag already there is left as it is."""
    config = json.dumps(ledger.to_json(), sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": LEDGER_TYPE,
        "config": {"mediaType": LEDGER_TYPE, "digest": registry.put_blob(config), "size": len(config)},
        "layers": [{"mediaType": EMPTY_TYPE, "digest": registry.put_blob(EMPTY), "size": len(EMPTY)}],
    }
    registry.put_manifest(tag, Manifest.of(OCI_MANIFEST, json.dumps(manifest, separators=(",", ":")).encode()))


def intend(registry: RegistryRepository, version: str, revision: str, config: str, manifest: str = "") -> None:
    """Before X.Y.Z's manifest is put: the build (its image configuration's digest `config`, and
    `manifest`, the digest of the manifest about to be put where the push knows it) this run puts up
    as `version`, so that a run stopped between the put and its confirmation can still be proven."""
    tags = registry.tags()
    tag = ledger_entry_tag(version, "entered", config)
    if tag in tags:
        return  # entered already: a resumed push of the same build
    ledger = read_ledger(registry, tags)
    entry = ledger.entries.get(version)
    if entry is not None and entry.digest:
        return  # confirmed already: a resumed push of the same image
    write_entry(registry, tag, ledger.intending(version, revision, config, manifest))


def enter(registry: RegistryRepository, version: str, labels: Mapping[str, str], config: str, digest: str) -> Ledger:
    """Confirm release `version` once X.Y.Z is in the registry as `digest` (the manifest this run's
    push or promote wrote, read back; `config`: its image configuration's digest), with its image's
    `labels`: its commit and its record. A release already confirmed is left as it is. Only the run
    that put X.Y.Z up confirms it, or a later one that proved it the same build (`check_built_here`):
    a run never enters what it merely finds."""
    from triton_release.contract import RELEASED_VERSIONS_LABEL, REVISION_LABEL
    from triton_release.history import released_versions

    tags = registry.tags()
    ledger = read_ledger(registry, tags)
    known = ledger.entries.get(version)
    if known is not None and known.digest:
        return ledger
    shipped = released_versions.parse(labels.get(RELEASED_VERSIONS_LABEL)) or {}
    intended = known if known is not None and known.config == config else _entered(registry, tags, version, config)
    if intended is not None:
        ledger = replace(ledger, entries={**ledger.entries, version: intended})
    updated = ledger.confirming(version, str(labels.get(REVISION_LABEL) or ""), config, digest, shipped)
    write_entry(registry, ledger_entry_tag(version, "confirmed", digest), updated)
    return updated


def _entered(registry: RegistryRepository, tags: Iterable[str], version: str, config: str) -> Entry | None:
    """The entry a push made of the build `config` as `version` before its put (its own tag: racing
    pushes each have theirs); None when there is none."""
    if parse_digest(config) is None:
        return None
    tag = ledger_entry_tag(version, "entered", config)
    if tag not in tags:
        return None
    found = read_entry(registry, tag)
    entry = found.entries.get(version) if found is not None else None
    return entry if entry is not None and entry.config == config else None


def check_built_here(registry: RegistryRepository, version: str, digest: str, revision: str) -> None:
    """Refuse to finish release `version` (evidence signed, tags moved) unless the ledger says a push
    of this tool put exactly this build up as X.Y.Z, from commit `revision`: its confirmed manifest
    `digest`, or, for a push stopped before its confirmation, the build it entered before the put
    (then confirmed here): the whole manifest digest where the push knew it before the put, else
    (the Docker daemon computed the manifest as it sent it) the image configuration. An image pushed
    as X.Y.Z by anyone else (its layers and labels copied, one ENV more, or the same config with
    other layers) is never signed with the release key nor given the channel."""
    tags = registry.tags()
    ledger = read_ledger(registry, tags)
    entry = ledger.entries.get(version)
    manifest = registry.manifest(digest)
    config = manifest.config_digest if manifest is not None else ""
    if entry is not None and not entry.digest and config and entry.config != config:  # a rival's entry: ours?
        entry = _entered(registry, tags, version, config) or entry
    if entry is not None and entry.commit == revision and config and entry.config == config:
        if not entry.digest and entry.manifest in ("", digest):
            labels = registry.image_config(digest).get("config", {}).get("Labels") or {}
            enter(registry, version, labels, config, digest)
            return
        if entry.digest == digest:
            return
    if entry is None:
        why = "the ledger has no entry for it: no push of triton-release put it up"
    elif not entry.digest and entry.manifest and entry.config == config:
        why = (
            f"the ledger says triton-release was putting up manifest {entry.manifest[:19]} of that image "
            f"configuration, and the registry's {version} is {digest[:19]}: the same configuration, other layers"
        )
    else:
        why = (
            f"the ledger says triton-release put up image configuration {entry.config[:19]} from "
            f"{entry.commit[:12]}, and the registry's {version} is {config[:19] or 'unreadable'}"
        )
    raise Refused(f"""
        {registry}:{version} ({digest}) in the registry is not a proven build of commit {revision[:12]}
        ({why}): it is left as it is, its evidence not signed, no tag moved onto it. Find out who pushed it
        (the registry's logs). The next release, after any change to the models, is numbered after it and
        goes out as usual.""")
