"""Releases: "the last release", and the next version from a change.

The tags themselves (the registry's immutable `X.Y.Z`, the moving `X.Y` and `X`, the provenance
`sha-<12 hex>`, the git tag `vX.Y.Z` a committed release gets) and their parsers live in
contract.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import semver

from triton_release import contract
from triton_release.errors import Refused, UsageError
from triton_release.history.changes import ChangeSet
from triton_release.history.git import Git
from triton_release.models.repository import datatype_name

if TYPE_CHECKING:
    from triton_release.models.config.schema import model_config_pb2


def parse_version(text: str, flag: str = "--version") -> semver.Version:
    """The release version X.Y.Z a user gave as `flag`; refused (a usage error) when it is not one."""
    version = contract.parse_release(text or "")
    if version is None:
        raise UsageError(f"{flag} {text!r}: give a release version X.Y.Z, such as 1.4.0.")
    return version


def versions_in(
    tags: list[str], parse: Callable[[str], semver.Version | None] = contract.parse_release
) -> list[semver.Version]:
    """The release versions among `tags` (`parse`: contract.parse_git_tag for git's vX.Y.Z), ascending."""
    return sorted(version for tag in tags if (version := parse(tag)) is not None)


def check_channel(channel: str) -> str:
    """A channel is a moving tag of its own: never a tag of a family the tool writes or reads
    (contract.py), which it would overwrite or be mistaken for."""
    if not contract.is_tag(channel or ""):
        raise UsageError(
            f"channel {channel!r} is not a valid tag: letters, digits, '_', '.', '-' (up to 128), "
            "e.g. latest or stable."
        )
    family = contract.owned_family(channel)
    if family is not None:
        raise UsageError(
            f"channel {channel!r} is a tag of triton-release's own ({family}: "
            f"{contract.FAMILIES[family][0]}), which it would overwrite or be mistaken for; name it "
            "like latest, stable or prod."
        )
    return channel


class Releases(Protocol):
    """What "the last release" needs of a registry repository."""

    def tags(self) -> list[str]: ...

    def image_config(self, reference: str) -> dict: ...


def previous_release(registry_tags: list[str], git: Git | None = None) -> tuple[semver.Version | None, str]:
    """The highest X.Y.Z tag of the registry repository, else the highest vX.Y.Z git tag."""
    found = versions_in(registry_tags)
    if found:
        return found[-1], "registry"
    if git is not None:
        found = versions_in(git.tags("v*"), contract.parse_git_tag)
        if found:
            return found[-1], "git tag"
    return None, "none"


@dataclass(frozen=True)
class LastRelease:
    """The base of the next release, found by `last_release_commit`."""

    commit: str | None  # None: no earlier release on this line of history
    why: str  # how it was found, for the user
    warnings: tuple[str, ...] = ()  # where git and the registry disagreed, and which one won


def whole_history(git: Git, why: str) -> str:
    """A shallow clone (actions/checkout's default, fetch-depth: 1) fetched whole, with its tags, with
    the checkout's own credentials; refused before anything is built when that fails. A note for the
    user when it fetched, "" when the clone was whole already."""
    if not git.is_shallow():
        return ""
    failed = git.fetch("--unshallow", "--tags")
    if failed or git.is_shallow():
        raise UsageError(f"""
            This checkout is a shallow clone (actions/checkout's default, fetch-depth: 1), and {why}; fetching
            the rest of its history failed ({failed or "it is still shallow"}). Check out the whole history: in
            the workflow, give actions/checkout `fetch-depth: 0`; locally, run `git fetch --unshallow --tags`.
            Then run again. Nothing was built.""")
    return "a shallow clone: its whole history was fetched first (actions/checkout with fetch-depth: 0 saves that)"


def last_release_commit(
    registry: Releases | None, git: Git, head: str = "HEAD", ledger: Mapping[str, str] | None = None
) -> LastRelease:
    """The commit of the last release on this line of history, the base of the next one: its
    vX.Y.Z git tag (the commit holding its bump), else its image's revision label, else the newest
    vX.Y.Z git tag. Releases made from other branches (a hotfix's v1.1.0) are passed over.

    The registry is the record: a git tag that points elsewhere than the release's revision (or the
    release commit made on it) was moved, and the revision wins, with a warning; a release whose
    revision this clone lacks, even after fetching it, is refused (a registry that holds releases is
    never a first release). `ledger`: X.Y.Z -> commit of every release ever made (registry/ledger.py);
    one newer than the registry's tags (deleted since) is the last release."""

    def on_this_line(ref: str) -> bool:
        return git.has_commit(ref) and git.is_ancestor(ref, head)

    versions = versions_in(registry.tags()) if registry is not None else []
    gone = [v for v in versions_in(list(ledger or {})) if not versions or v > versions[-1]]
    if gone and ledger is not None and on_this_line(ledger[str(gone[-1])]):
        return LastRelease(
            release_commit_on(git, ledger[str(gone[-1])], head, gone[-1]),
            f"the commit of {gone[-1]}, in the registry's ledger (deleted since)",
        )
    if registry is not None and versions:
        where = f"{registry}:{versions[-1]}"
        labels = registry.image_config(str(versions[-1])).get("config", {}).get("Labels") or {}
        revision = str(labels.get(contract.REVISION_LABEL) or "")
        if revision and not git.has_commit(revision):
            git.fetch(revision)  # on a branch this clone did not fetch: origin serves a reachable commit
        if revision and not git.has_commit(revision):
            raise Refused(f"""
                {where}, the last release, was built from commit {revision[:12]}, which neither this clone nor
                its remote has: the commit it was released from never reached origin (a release made from a
                local checkout, or history rewritten since). Push that commit from the checkout that released
                it (`git push origin {revision[:12]}:refs/heads/<a branch>`), then run again; if {registry}
                holds the releases of another git repository, release to a registry repository of its own.
                Nothing was built.""")
        tag = contract.git_tag(versions[-1])
        if on_this_line(tag):
            tagged = git.text("rev-parse", f"{tag}^{{commit}}")
            if not revision or revision in (tagged, _release_commit_parent(git, tagged, versions[-1])):
                return LastRelease(tag, f"git tag {tag} of the latest release {where}")
            released = release_commit_on(git, revision, head, versions[-1]) if on_this_line(revision) else revision
            warning = (
                f"git tag {tag} points at {tagged[:12]}, but {where} was built from {revision[:12]}: the tag was "
                f"moved. The registry's record wins: the base is {released[:12]}. Put the tag back with `git tag "
                f"-f {tag} {released[:12]}` (and `git push -f origin {tag}`)."
            )
            if on_this_line(revision):
                return LastRelease(released, _revision_why(where, revision, released), (warning,))
        if revision and on_this_line(revision):
            released = release_commit_on(git, revision, head, versions[-1])
            return LastRelease(released, _revision_why(where, revision, released))
    for version in reversed(versions_in(git.tags("v*"), contract.parse_git_tag)):
        if on_this_line(contract.git_tag(version)):
            return LastRelease(contract.git_tag(version), f"git tag {contract.git_tag(version)}")
    return LastRelease(None, "no earlier release on this branch: a first release of every model")


def release_commit_on(git: Git, revision: str, head: str, version: semver.Version) -> str:
    """The `release X.Y.Z` commit the tool made on `revision` (the commit X.Y.Z was built from: its
    bump, `--commit`) where one lies between it and `head`, else `revision`. That commit is the
    release's own, no change: a base of `revision` would read its bump as one and release again."""
    subject = f"release {version}"
    listed = git.text("log", "--ancestry-path", "--format=%H %P%x09%s", f"{revision}..{head}")
    for line in listed.splitlines():
        ids, _, found = line.partition("\t")
        commit, *parents = ids.split()
        if found == subject and parents == [revision]:
            return commit
    return revision


def _revision_why(where: str, revision: str, released: str) -> str:
    if released == revision:
        return f"the revision of {where}"
    return f"the release commit made on the revision of {where} ({revision[:12]})"


def _release_commit_parent(git: Git, tagged: str, version: semver.Version) -> str:
    """The commit a `release X.Y.Z` commit was made on (`--commit`), "" for any other commit."""
    if git.text("log", "-1", "--format=%s", tagged) != f"release {version}":
        return ""
    parent = git.run("rev-parse", "-q", "--verify", f"{tagged}^", check=False)
    return parent.stdout.decode().strip() if parent.returncode == 0 else ""


def next_version(previous: semver.Version | None, kind: str | None) -> semver.Version | None:
    if kind is None:
        return None
    if previous is None:
        return semver.Version(1, 0, 0)
    return {"major": previous.bump_major, "minor": previous.bump_minor, "patch": previous.bump_patch}[kind]()


# -- the kind of release a change makes ------------------------------------------------------


def signature(config: model_config_pb2.ModelConfig | None) -> dict | None:
    """What clients depend on: tensors (data type, dims) and whether there is a batch dimension."""
    if config is None:
        return None
    tensors = {
        f"{kind} {t.name}": (datatype_name(t.data_type), tuple(t.dims))
        for kind in ("input", "output")
        for t in getattr(config, kind)
    }
    return {"tensors": tensors, "batched": config.max_batch_size > 0}


def served_signature(config: dict) -> dict | None:
    """The signature of a model config as the server gives it (`GET /v2/models/<m>/config`,
    JSON): how an auto-complete model, which has no config.pbtxt, is known."""
    from google.protobuf import json_format

    from triton_release.models.config.schema import model_config_pb2

    try:
        parsed = json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError):
        return None
    return signature(parsed)


def signatures_label(signatures: dict[str, dict]) -> str:
    return json.dumps(
        {
            m: {
                "tensors": {k: [dtype, list(dims)] for k, (dtype, dims) in sorted(s["tensors"].items())},
                "batched": s["batched"],
            }
            for m, s in sorted(signatures.items())
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def signatures_from_label(text: str | None) -> dict[str, dict]:
    """The label's signatures; {} for none or one this version cannot read."""
    try:
        found = json.loads(text or "{}")
        return {
            str(m): {
                "tensors": {str(k): (str(v[0]), tuple(int(d) for d in v[1])) for k, v in s["tensors"].items()},
                "batched": bool(s["batched"]),
            }
            for m, s in found.items()
        }
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return {}


@dataclass(frozen=True)
class ReleaseKind:
    kind: str | None  # major | minor | patch | None (nothing changed in the image)
    reasons: tuple[str, ...]

    def to_json(self) -> dict:
        return {"kind": self.kind, "reasons": list(self.reasons)}


ORDER = {None: 0, "patch": 1, "minor": 2, "major": 3}


def release_kind(changes: ChangeSet, bumped: set[str], signatures: dict | None = None) -> ReleaseKind:
    """The semver part to bump, with a reason for each step up. `signatures` may give
    (side, model) -> signature for models without config.pbtxt, as the server saw them."""
    if changes.base is None:
        return ReleaseKind("minor", ("first release: every model counts as added (1.0.0 when no release exists yet)",))
    reasons: list[tuple[str, str]] = []
    for name, change in sorted(changes.models.items()):
        if change.status == "removed":
            reasons.append(("major", f"{name}: model removed"))
            continue
        if change.status == "added":
            reasons.append(("minor", f"{name}: model added"))
            continue
        if change.golden_only:
            continue
        found = [("minor", f"{name}: new version folder")] if name in bumped or change.added_versions else []
        found += _signature_change(name, changes, signatures or {})
        reasons.extend(found or [("patch", f"{name}: {', '.join(change.reasons) or 'files changed'}")])
    if not reasons:
        return ReleaseKind(None, ("nothing changed in the image",))
    kind = max((k for k, _ in reasons), key=ORDER.__getitem__)
    return ReleaseKind(kind, tuple(r for _, r in reasons))


def _signature_change(name: str, changes: ChangeSet, signatures: dict) -> list[tuple[str, str]]:
    def sig(side: str) -> dict | None:
        given = signatures.get((side, name))
        return given if given is not None else signature(changes.configs.get((side, name)))

    old, new = sig("base"), sig("head")
    if old is None or new is None:
        return [("minor", f"{name}: signature unknown (no config.pbtxt); counted as minor")]
    found = []
    if old["batched"] != new["batched"]:
        found.append(("major", f"{name}: max_batch_size changed between 0 and non-zero"))
    for tensor, spec in old["tensors"].items():
        if tensor not in new["tensors"]:
            found.append(("major", f"{name}: {tensor} removed or renamed"))
        elif new["tensors"][tensor] != spec:
            (dtype, dims), (ndtype, ndims) = spec, new["tensors"][tensor]
            found.append(("major", f"{name}: {tensor} changed from {dtype} {list(dims)} to {ndtype} {list(ndims)}"))
    for tensor in sorted(set(new["tensors"]) - set(old["tensors"])):
        found.append(("minor", f"{name}: {tensor} added"))
    return found
