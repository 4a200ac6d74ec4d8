"""The contract between runs: every tag family the tool writes to or reads from a registry
repository, each with its maker and its test, so that stage, test, promote, verify, rollback and
a rerun agree, and a channel (a user's moving tag) can never be one of them.

| family     | example                          | written by                     |
| ---------- | -------------------------------- | ------------------------------ |
| release    | 1.4.0                            | push, promote (immutable)      |
| moving     | 1.4, 1                           | push, promote                  |
| provenance | sha-0123456789ab                 | push, promote                  |
| candidate  | candidate-0123456789ab           | stage                          |
| local      | candidate                        | the local build's tag          |
| record     | sha256-<hex>.golden-<shard>      | test of a candidate's shard    |
| rollback   | triton-release.rollback.<channel>| rollback (the channel's past)  |
| evidence   | sha256-<hex>.att, .sig, sha256-<hex> | release evidence (cosign's layout, OCI tag schema) |

The makers and parsers: candidate `candidate_tag`, `is_candidate_tag` (CANDIDATE_PREFIX); local
CANDIDATE_TAG; record `record_tag`, RECORD_TAG; rollback `rollback_tag` (ROLLBACK_PREFIX);
evidence `evidence_tag`, `evidence_subject`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from triton_release.errors import UsageError

RELEASE = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")  # semver: no leading zeros
MOVING = re.compile(r"^\d+(\.\d+)?$")
PROVENANCE_PREFIX = "sha-"
CANDIDATE_PREFIX = "candidate-"
CANDIDATE_TAG = "candidate"  # the local build tag; the previous candidate's layer order keeps the cache warm
CANDIDATE_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
SHARD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,48}$")  # the record tag stays within 128 characters
RECORD_TAG = re.compile(r"^sha256-(?P<hex>[0-9a-f]{64})\.golden-(?P<shard>[A-Za-z0-9_][A-Za-z0-9_.-]*)$")
ROLLBACK_PREFIX = "triton-release.rollback."
EVIDENCE = re.compile(r"^sha256-(?P<hex>[0-9a-f]{64})(\.(att|sig|sbom))?$")
ATTESTATIONS_SUFFIX = ".att"  # cosign's attestations of a digest: the tool writes these

# family -> what a tag of it looks like, and its test: the channel check refuses every one
FAMILIES: dict[str, tuple[str, Callable[[str], object]]] = {
    "release": ("X.Y.Z", lambda tag: re.match(r"^\d+\.\d+\.\d+$", tag)),
    "moving version": ("X.Y or X", MOVING.match),
    "provenance": ("sha-<12 hex>", lambda tag: tag.startswith(PROVENANCE_PREFIX)),
    "candidate": ("candidate-<12 hex>", lambda tag: tag.startswith(CANDIDATE_PREFIX)),
    "local build": (CANDIDATE_TAG, lambda tag: tag == CANDIDATE_TAG),
    "golden record or release evidence": ("sha256-<hex>...", lambda tag: tag.startswith("sha256-")),
    "rollback record": ("triton-release.rollback.<channel>", lambda tag: tag.startswith("triton-release.")),
}


def owned_family(tag: str) -> str | None:
    """The name of the tool's tag family `tag` belongs to (or would collide with), else None."""
    for name, (_, test) in FAMILIES.items():
        if test(tag):
            return name
    return None


def candidate_tag(revision: str) -> str:
    """The candidate's tag in the release repository: candidate-<first 12 hex of the commit>."""
    if not re.fullmatch(r"[0-9a-f]{12,64}", revision or ""):
        raise UsageError(f"{revision!r} is not a commit id; a candidate is named after the commit it was built from.")
    return f"{CANDIDATE_PREFIX}{revision[:12]}"


def is_candidate_tag(tag: str) -> bool:
    return re.fullmatch(rf"{CANDIDATE_PREFIX}[0-9a-f]{{12}}", tag) is not None


def record_tag(candidate: str, shard: str) -> str:
    """The tag of the record of `shard` for the candidate whose manifest digest is `candidate`."""
    if not CANDIDATE_DIGEST.match(candidate or ""):
        raise UsageError(f"{candidate!r} is not a candidate's manifest digest (sha256: and 64 hex digits).")
    if not SHARD_NAME.match(shard or ""):
        raise UsageError(f"shard {shard!r}: a shard name is letters, digits, '_', '.', '-' (up to 49), "
                         "such as shard-1.")
    return f"sha256-{candidate.split(':', 1)[1]}.golden-{shard}"


def rollback_tag(channel: str) -> str:
    return f"{ROLLBACK_PREFIX}{channel}"


def evidence_tag(digest: str) -> str:
    """The tag of the attestations (release evidence) of the manifest `digest`, as cosign names it."""
    return f"sha256-{digest.split(':', 1)[1]}{ATTESTATIONS_SUFFIX}"


def evidence_subject(tag: str) -> str | None:
    """The manifest digest whose evidence (or cosign signature, or SBOM) `tag` holds; None when it
    is not such a tag."""
    match = EVIDENCE.match(tag)
    return f"sha256:{match['hex']}" if match else None
