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
| ledger     | triton-release.ledger            | push, promote (every release ever, registry/ledger.py) |

The makers and parsers: candidate `candidate_tag`, `is_candidate_tag` (CANDIDATE_PREFIX); local
CANDIDATE_TAG; record `record_tag`, RECORD_TAG; rollback `rollback_tag` (ROLLBACK_PREFIX);
evidence `evidence_tag`, `evidence_subject`, and the evidence's predicate types (GOLDEN_TYPE,
PROVENANCE_TYPE, SBOM_TYPE, TEST_RESULT_TYPE; KINDS names them). The repository names the tags
live in: REPO_REF, and `lower_cased` for one typed in any case.

Every label the tool writes on an image or a container, or reads from one, is named here too:

| label                               | on                 | holds                                        |
| ----------------------------------- | ------------------ | -------------------------------------------- |
| org.opencontainers.image.revision   | release image      | the commit it was built from                 |
| org.opencontainers.image.source     | release image      | where that commit lives                      |
| org.opencontainers.image.created    | release image      | when it was built                            |
| org.opencontainers.image.version    | release image      | its X.Y.Z                                    |
| triton-release.base                 | release image      | the commit the release was bumped from       |
| triton-release.channel              | release image      | the channel the release was made for         |
| triton-release.signatures           | release image      | auto-complete models' served signatures      |
| triton-release.models               | release image      | model -> its version folders                 |
| triton-release.versions             | release image      | model -> version -> git tree id (the record) |
| triton-release.environments         | release image      | model -> its environment's fingerprint       |
| triton-release.layers               | release image      | the layer order, for the next build's cache  |
| triton-release.python               | release image      | the Python the stub was chosen for           |
| triton-release.stub                 | release image      | the stub's provider and origin               |
| triton-release.shards               | candidate image    | the shard plan                               |
| triton-release.changed              | candidate image    | the models the shards' records must cover    |
| triton-release.new-versions         | candidate image    | the models given a new version (drift)       |
| triton-release.drift-unmeasurable   | candidate image    | model -> why its drift cannot be measured    |
| triton-release.build-inputs         | candidate image    | what it was built from besides its commit    |
| triton-release.owner                | every container    | the run that made it                         |
| triton-release.server               | server container   | the run id                                   |
| triton-release.probe                | probe container    | 1                                            |
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
LEDGER_TAG = "triton-release.ledger"  # every release ever issued, and every version it shipped
EVIDENCE = re.compile(r"^sha256-(?P<hex>[0-9a-f]{64})(\.(att|sig|sbom))?$")
ATTESTATIONS_SUFFIX = ".att"  # cosign's attestations of a digest: the tool writes these

# -- labels: every image and container label the tool writes or reads -----------------------------
# OCI's annotation keys, as labels: steps/image.py's build writes them on the release image
REVISION_LABEL = "org.opencontainers.image.revision"  # the commit it was built from: a rerun and evidence read it
SOURCE_LABEL = "org.opencontainers.image.source"  # where that commit lives: evidence/attach.py reads it
# when the image was built: the build, publish (a rollback since?), promote and evidence read it
CREATED_LABEL = "org.opencontainers.image.created"
VERSION_LABEL = "org.opencontainers.image.version"  # its X.Y.Z (steps/golden.py relabels it): promote reads it
# the tool's own, on the release image (and the candidate, built the same way)
BASE_LABEL = "triton-release.base"  # the commit a release was bumped from: a rerun can redo its bump
CHANNEL_LABEL = "triton-release.channel"  # the channel a release was made for: a rerun finishes only that
SIGNATURES_LABEL = "triton-release.signatures"  # auto-complete models: the signature the server completed
MODELS_LABEL = "triton-release.models"  # model -> its version folders, in the image
# model -> version -> git tree id of that version folder, in the image (history/released_versions.py's record)
RELEASED_VERSIONS_LABEL = "triton-release.versions"
ENVIRONMENTS_LABEL = "triton-release.environments"  # model -> its environment's fingerprint
LAYER_ORDER_LABEL = "triton-release.layers"  # the layers in order, by digest: the next build keeps the cache warm
PYTHON_LABEL = "triton-release.python"  # the Python the stub was chosen for: evidence/attach.py's rerun reads it
STUB_LABEL = "triton-release.stub"  # "<provider>: <origin>" of the stub: evidence/attach.py's rerun reads it
# on the candidate: fanout/stage.py writes them, registry/candidate.py and registry/candidate/labels.py read them
SHARDS_LABEL = "triton-release.shards"  # the shard plan, JSON: [{"name": "shard-1", "models": [...]}, ...]
CHANGED_LABEL = "triton-release.changed"  # the models the shards' records must cover, JSON list
# the models whose files changed since the last release (the changed-models output after promote), JSON list
CHANGED_MODELS_LABEL = "triton-release.changed-models"
NEW_VERSIONS_LABEL = "triton-release.new-versions"  # the models given a new version: drift, JSON list
# model -> why its drift cannot be measured in the candidate (its environment changed), JSON object
DRIFT_UNMEASURABLE_LABEL = "triton-release.drift-unmeasurable"
BUILD_INPUTS_LABEL = "triton-release.build-inputs"  # what the candidate was built from besides its commit, JSON
# on containers
OWNER_LABEL = "triton-release.owner"  # on every container the tool makes: removed once its run is gone
SERVER_LABEL = "triton-release.server"  # on a server container (server/container.py): the run's id
PROBE_LABEL = "triton-release.probe"  # on a base image's probe container (image/base.py): tests check none is left

# The in-toto predicate types of a release's evidence (sha256-<hex>.att), which verify and a deploy
# policy read, and what each is called in messages.
GOLDEN_TYPE = "https://triton-release.dev/golden/v1"
PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"
SBOM_TYPE = "https://cyclonedx.org/bom"
# in-toto's vetted Test Results predicate: the golden cases again, in the shape policy engines check
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
KINDS = {
    GOLDEN_TYPE: "golden results",
    PROVENANCE_TYPE: "SLSA provenance",
    SBOM_TYPE: "CycloneDX SBOM",
    TEST_RESULT_TYPE: "in-toto test results",
}

# A registry repository HOST[:PORT]/NAME, as the tool accepts it (registry/client.py parses it).
REPO_REF = re.compile(r"^(?P<host>[A-Za-z0-9.-]+(:[0-9]+)?)/(?P<name>[a-z0-9]+([._/-][a-z0-9]+)*)$")
_ANY_CASE_REF = re.compile(REPO_REF.pattern, re.IGNORECASE | re.ASCII)  # as typed: ghcr.io/${{ github.repository }}

# family -> what a tag of it looks like, and its test: the channel check refuses every one
FAMILIES: dict[str, tuple[str, Callable[[str], object]]] = {
    # X.Y.Z and its look-alikes with leading zeros (1.02.3): a channel never reads as a release
    "release": ("X.Y.Z", lambda tag: re.match(r"^\d+\.\d+\.\d+$", tag)),
    "moving version": ("X.Y or X", MOVING.match),
    "provenance": ("sha-<12 hex>", lambda tag: tag.startswith(PROVENANCE_PREFIX)),
    "candidate": ("candidate-<12 hex>", lambda tag: tag.startswith(CANDIDATE_PREFIX)),
    "local build": (CANDIDATE_TAG, lambda tag: tag == CANDIDATE_TAG),
    "golden record or release evidence": ("sha256-<hex>...", lambda tag: tag.startswith("sha256-")),
    "ledger": (LEDGER_TAG, lambda tag: tag == LEDGER_TAG),
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
        raise UsageError(
            f"shard {shard!r}: a shard name is letters, digits, '_', '.', '-' (up to 49), such as shard-1."
        )
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


def lower_cased(ref: str) -> str:
    """A registry repository HOST/NAME as Docker names it: lower case. Docker refuses upper case in a
    repository's path, and a host name is case-insensitive, so `ghcr.io/MyOrg/Models` (what
    `ghcr.io/${{ github.repository }}` gives) is `ghcr.io/myorg/models`, as docker/metadata-action
    does. Anything else, a tag included, is returned as given, for `RegistryRepository.parse` to refuse."""
    return ref.lower() if isinstance(ref, str) and _ANY_CASE_REF.match(ref) else ref
