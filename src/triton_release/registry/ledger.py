"""The ledger: every release this registry repository was ever given, and every version of every
model it ever shipped, kept apart from the release images so that deleting a release (by hand,
or `--keep` with a hand delete) or removing a model never loses what was released.

It is a small OCI artifact under the tag `triton-release.ledger` (contract.LEDGER_TAG): a manifest
whose config is the ledger (JSON, media type LEDGER_TYPE, also its `artifactType`) and whose one
layer is the empty JSON. Each push of X.Y.Z adds that release (its commit) and the record it
shipped (history/released_versions.py: model -> version -> git tree), once X.Y.Z is in the registry. The
next release is numbered after the highest release the ledger or the registry's tags hold, so an
X.Y.Z is never issued twice; and a (model, version) once released is never shipped with other
bytes, re-added models included (history/released_versions.py's reconcile, fed by `versions`).

The ledger comes from outside the process: like the image labels it is proven against git before
it is used (history/released_versions.prove), and an unreadable one is refused, never taken for none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import semver

from triton_release.contract import LEDGER_TAG, is_release_tag
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

    def to_json(self) -> dict:
        return {"commit": self.commit, "config": self.config, "digest": self.digest}


@dataclass(frozen=True)
class Ledger:
    entries: Mapping[str, Entry] = field(default_factory=dict)  # X.Y.Z -> its entry
    versions: Versions = field(default_factory=dict)  # every version of every model released (confirmed)

    @property
    def releases(self) -> dict[str, str]:
        """X.Y.Z -> commit of every release confirmed in the registry: each number issued."""
        return {v: e.commit for v, e in self.entries.items() if e.digest}

    @property
    def newest(self) -> semver.Version | None:
        found = [semver.Version.parse(v) for v in self.releases]
        return max(found) if found else None

    def intending(self, version: str, commit: str, config: str) -> Ledger:
        """This ledger with `version` about to be put up (not issued until confirmed)."""
        return replace(self, entries={**self.entries, version: Entry(commit, config)})

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
        return Ledger({**self.entries, version: Entry(commit, config, digest)}, merged)

    def to_json(self) -> dict:
        ordered = sorted(self.entries.items(), key=lambda item: semver.Version.parse(item[0]))
        return {
            "releases": {v: e.to_json() for v, e in ordered},
            "versions": {m: {str(v): t for v, t in sorted(vs.items())} for m, vs in sorted(self.versions.items())},
        }

    @classmethod
    def from_json(cls, data: object) -> Ledger:
        """The ledger `data` holds; ValueError naming what is wrong when it is not one."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        releases, versions = data.get("releases"), data.get("versions")
        if not isinstance(releases, dict) or not all(
            isinstance(v, str)
            and is_release_tag(v)
            and isinstance(e, dict)
            and all(isinstance(e.get(k), str) for k in ("commit", "config", "digest"))
            for v, e in releases.items()
        ):
            raise ValueError("'releases' is not an object of X.Y.Z -> {commit, config, digest}")
        if not isinstance(versions, dict) or not all(
            isinstance(vs, dict) and all(str(n).isdigit() and isinstance(t, str) for n, t in vs.items())
            for vs in versions.values()
        ):
            raise ValueError("'versions' is not an object of model -> version -> git tree")
        return cls(
            {v: Entry(e["commit"], e["config"], e["digest"]) for v, e in releases.items()},
            {str(m): {int(n): t for n, t in vs.items()} for m, vs in versions.items()},
        )


def read_ledger(registry: RegistryRepository) -> Ledger:
    """The ledger of `registry`; an empty one where there is none (a repository whose releases all
    predate it, or none). Anything under its tag that is not a readable ledger is refused."""
    manifest = registry.manifest(LEDGER_TAG)
    if manifest is None:
        return Ledger()

    def unreadable(why: str) -> Refused:
        return Refused(f"""
            {registry}:{LEDGER_TAG}, the ledger of every release of {registry}, cannot be read ({why}): it is
            not trusted, and nothing was built. Find out who wrote it; triton-release writes it on every push.""")

    try:
        return Ledger.from_json(json.loads(artifact_config(registry, manifest, LEDGER_TYPE)))
    except ValueError as exc:  # also UnicodeDecodeError
        raise unreadable(str(exc)) from None


def write_ledger(registry: RegistryRepository, ledger: Ledger) -> None:
    config = json.dumps(ledger.to_json(), sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": LEDGER_TYPE,
        "config": {"mediaType": LEDGER_TYPE, "digest": registry.put_blob(config), "size": len(config)},
        "layers": [{"mediaType": EMPTY_TYPE, "digest": registry.put_blob(EMPTY), "size": len(EMPTY)}],
    }
    registry.put_manifest(LEDGER_TAG, Manifest.of(OCI_MANIFEST, json.dumps(manifest, separators=(",", ":")).encode()))


def intend(registry: RegistryRepository, version: str, revision: str, config: str) -> None:
    """Before X.Y.Z's manifest is put: the build (its image configuration's digest) this run puts up as
    `version`, so that a run stopped between the put and its confirmation can still be proven."""
    ledger = read_ledger(registry)
    entry = ledger.entries.get(version)
    if entry is not None and entry.digest:
        return  # confirmed already: a resumed push of the same image
    write_ledger(registry, ledger.intending(version, revision, config))


def enter(registry: RegistryRepository, version: str, labels: Mapping[str, str], config: str, digest: str) -> Ledger:
    """Confirm release `version` once X.Y.Z is in the registry as `digest` (the manifest this run's
    push or promote wrote, read back; `config`: its image configuration's digest), with its image's
    `labels`: its commit and its record. A release already confirmed is left as it is. Only the run
    that put X.Y.Z up confirms it, or a later one that proved it the same build (`check_built_here`):
    a run never enters what it merely finds."""
    from triton_release.contract import RELEASED_VERSIONS_LABEL, REVISION_LABEL
    from triton_release.history import released_versions

    ledger = read_ledger(registry)
    known = ledger.entries.get(version)
    if known is not None and known.digest:
        return ledger
    shipped = released_versions.parse(labels.get(RELEASED_VERSIONS_LABEL)) or {}
    updated = ledger.confirming(version, str(labels.get(REVISION_LABEL) or ""), config, digest, shipped)
    write_ledger(registry, updated)
    return updated


def check_built_here(registry: RegistryRepository, version: str, digest: str, revision: str) -> None:
    """Refuse to finish release `version` (evidence signed, tags moved) unless the ledger says a push
    of this tool put exactly this build up as X.Y.Z, from commit `revision`: its confirmed manifest
    `digest`, or, for a push stopped before its confirmation, the image configuration it entered
    before the put (then confirmed here). An image pushed as X.Y.Z by anyone else (its layers and
    labels copied, one ENV more) is never signed with the release key nor given the channel."""
    ledger = read_ledger(registry)
    entry = ledger.entries.get(version)
    manifest = registry.manifest(digest)
    config = manifest.config_digest if manifest is not None else ""
    if entry is not None and entry.commit == revision and config and entry.config == config:
        if not entry.digest:
            labels = registry.image_config(digest).get("config", {}).get("Labels") or {}
            enter(registry, version, labels, config, digest)
            return
        if entry.digest == digest:
            return
    why = (
        "the ledger has no entry for it: no push of triton-release put it up"
        if entry is None
        else f"the ledger says triton-release put up image configuration {entry.config[:19]} from "
        f"{entry.commit[:12]}, and the registry's {version} is {config[:19] or 'unreadable'}"
    )
    raise Refused(f"""
        {registry}:{version} ({digest}) in the registry is not a proven build of commit {revision[:12]}
        ({why}): it is left as it is, its evidence not signed, no tag moved onto it. Find out who pushed it
        (the registry's logs). The next release, after any change to the models, is numbered after it and
        goes out as usual.""")
