"""The contract between runs: every tag family the tool writes to or reads from a registry
repository, each with its maker and its test, so that stage, test, promote, verify, rollback and
a rerun agree, and a channel (a user's moving tag) can never be one of them.

| family       | example                              | written by                                             |
| ------------ | ------------------------------------ | ------------------------------------------------------ |
| release      | 1.4.0                                | push, promote (immutable)                              |
| moving       | 1.4, 1                               | push, promote                                          |
| provenance   | sha-0123456789ab                     | push, promote                                          |
| candidate    | candidate-0123456789ab               | stage                                                  |
| local        | candidate                            | the local build's tag                                  |
| shard result | sha256-<hex>.golden-<shard>          | test of a candidate's shard                            |
| rollback     | triton-release.rollback.<channel>    | rollback (the channel's past)                          |
| evidence     | sha256-<hex>.att, .sig, sha256-<hex> | release evidence (cosign's layout, OCI tag schema)     |
| ledger       | triton-release.ledger.1.4.0.entered-<12 hex>, .confirmed-<12 hex> | push, promote (every release ever, registry/ledger.py; append-only) |
| old ledger   | triton-release.ledger                | read only: the single tag earlier versions rewrote     |

Each grammar has one parser here, and every other module calls it (tests/unit/test_one_grammar.py
checks that no other module compiles a release version or an `@sha256:` reference). Each uses
fullmatch: nothing before or after what it names is taken.
- release `parse_release` (X.Y.Z -> a semver Version, None for anything else), `is_release_tag`,
  `looks_like_release` (also 1.02.3, which a channel must not be); its git tag `git_tag`,
  `parse_git_tag` (vX.Y.Z); moving `is_moving_tag` and `moving_tags` (X.Y, X, sha-<12 hex>, the
  channel; `tags` "version": sha-<12 hex> alone, TAG_SETS); provenance `provenance_tag`, `is_provenance_tag`;
- a tag at all `is_tag` (Docker's grammar: letters, digits, '_', '.', '-', up to 128);
- candidate `candidate_tag`, `is_candidate_tag` (CANDIDATE_PREFIX); local CANDIDATE_TAG;
- shard result `shard_result_tag`, `parse_shard_result_tag`; shard names `is_shard_name` (what a
  tag holds) and `is_planned_shard_name` (what a plan makes: shard-1, shard-2, ...);
- rollback `rollback_tag` (ROLLBACK_PREFIX);
- ledger `ledger_entry_tag`, `parse_ledger_entry_tag`, `is_ledger_tag` (LEDGER_PREFIX; LEDGER_TAG, the old single tag);
- evidence `evidence_tag`, `evidence_subject` (and both families' `is_artifact_tag`), and the evidence's predicate types (GOLDEN_TYPE,
  PROVENANCE_TYPE, SBOM_TYPE, TEST_RESULT_TYPE; KINDS names them);
- a manifest digest `parse_digest` (sha256:<64 hex> -> the hex, None for anything else), and
  `digest_hex` for a digest the caller holds (refused when it is not one);
- references: `parse_repository` (a repository as Docker resolves it: `team/models` is Docker Hub's,
  HOST[:PORT]/NAME another registry's -> RepositoryName), `same_repository`, `lower_cased` for one typed
  in any case, `parse_tag_ref` (REPO:TAG -> (REPO, TAG)) and `parse_digest_ref`
  (REPO@sha256:<64 hex> -> (REPO, digest)).

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
| triton-release.changed              | candidate image    | the models the shards' results must cover    |
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
from dataclasses import dataclass

import semver

from triton_release.errors import UsageError

_NUMBER = r"(0|[1-9]\d*)"  # semver: no leading zeros
_RELEASE = re.compile(rf"{_NUMBER}\.{_NUMBER}\.{_NUMBER}")
_RELEASE_LOOKALIKE = re.compile(r"\d+\.\d+\.\d+")  # 1.02.3 too: a channel never reads as a release
GIT_TAG_PREFIX = "v"  # a committed release's git tag: vX.Y.Z
_MOVING = re.compile(r"\d+(\.\d+)?")  # X.Y, X
PROVENANCE_PREFIX = "sha-"
CANDIDATE_PREFIX = "candidate-"
_COMMIT = re.compile(r"[0-9a-f]{12,64}")  # a git commit id, whole or abbreviated
_CANDIDATE = re.compile(rf"{CANDIDATE_PREFIX}[0-9a-f]{{12}}")
CANDIDATE_TAG = "candidate"  # the local build tag; the previous candidate's layer order keeps the cache warm
_DIGEST = re.compile(r"sha256:(?P<hex>[0-9a-f]{64})")  # a manifest's (or a blob's) digest
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # Docker's tag grammar
# REPO@sha256:<64 hex>: a candidate, an image pinned by its manifest
_DIGEST_REF = re.compile(r"(?P<repository>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})")
# REPO:TAG: the host may have a port, the path's segments hold no ':'; the tag follows the last one
_TAG_REF = re.compile(rf"(?P<repository>[^@\s,/]+(/[^@\s,/:]+)+):(?P<tag>{_TAG.pattern})")
_SHARD_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,48}")  # the shard result tag stays within 128 characters
_PLANNED_SHARD_NAME = re.compile(r"shard-[1-9][0-9]{0,2}")  # the names a plan makes
_SHARD_RESULT_TAG = re.compile(rf"sha256-(?P<hex>[0-9a-f]{{64}})\.golden-(?P<shard>{_SHARD_NAME.pattern})")
ROLLBACK_PREFIX = "triton-release.rollback."
LEDGER_TAG = "triton-release.ledger"  # the ledger as one tag, rewritten by each push: read, no longer written
# the ledger, append-only: one tag per entry, triton-release.ledger.<X.Y.Z>.<phase>-<12 hex>, never rewritten
LEDGER_PREFIX = f"{LEDGER_TAG}."
LEDGER_PHASES = (
    "entered",
    "confirmed",
)  # entered before X.Y.Z's put (12 hex of the build's config), confirmed after (of its manifest)
_LEDGER_ENTRY = re.compile(
    rf"{re.escape(LEDGER_PREFIX)}(?P<version>{_NUMBER}\.{_NUMBER}\.{_NUMBER})\.(?P<phase>entered|confirmed)-(?P<hex>[0-9a-f]{{12}})"
)
_EVIDENCE = re.compile(r"sha256-(?P<hex>[0-9a-f]{64})(\.(att|sig|sbom))?")
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
# on the candidate: fanout/stage.py writes them, registry/candidate/ (stage.py, labels.py) reads them
SHARDS_LABEL = "triton-release.shards"  # the shard plan, JSON: [{"name": "shard-1", "models": [...]}, ...]
CHANGED_LABEL = "triton-release.changed"  # the models the shards' results must cover, JSON list
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
# the value of SERVER_LABEL and PROBE_LABEL, from this variable: the run's, so that parallel runs on
# one daemon (the test suite's two workers) can tell their containers from the other's
RUN_ID_VARIABLE = "TRITON_RELEASE_RUN_ID"

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

# A registry repository as Docker reads it: which part is the registry is the docker SDK's rule
# (docker.auth.resolve_repository_name); the grammar of a host and of a path component is the
# distribution reference's (github.com/distribution/reference), which the SDK does not check.
HUB = "docker.io"  # Docker Hub, as Docker names it: docker.io/X, index.docker.io/X and X without a host
HUB_API_HOST = "registry-1.docker.io"  # where Docker Hub's registry API answers
HUB_LIBRARY = "library"  # Docker Hub's official images: a one-component name is library/NAME
_HOST_COMPONENT = r"(?:[a-z0-9]|[a-z0-9][a-z0-9-]*[a-z0-9])"
_REGISTRY_HOST = re.compile(rf"(?:{_HOST_COMPONENT}(?:\.{_HOST_COMPONENT})*|\[[0-9a-f:]+\])(?::[0-9]+)?")
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY_PATH = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")

# family -> what a tag of it looks like, and its test: the channel check refuses every one
FAMILIES: dict[str, tuple[str, Callable[[str], object]]] = {
    # X.Y.Z and its look-alikes with leading zeros (1.02.3): a channel never reads as a release
    "release": ("X.Y.Z", lambda tag: looks_like_release(tag)),
    "moving version": ("X.Y or X", lambda tag: is_moving_tag(tag)),
    "provenance": ("sha-<12 hex>", lambda tag: is_provenance_tag(tag)),
    "candidate": ("candidate-<12 hex>", lambda tag: tag.startswith(CANDIDATE_PREFIX)),
    "local build": (CANDIDATE_TAG, lambda tag: tag == CANDIDATE_TAG),
    "shard result or release evidence": ("sha256-<hex>...", lambda tag: is_artifact_tag(tag)),
    "ledger": (f"{LEDGER_TAG}[.<X.Y.Z>.<phase>-<12 hex>]", lambda tag: is_ledger_tag(tag)),
    "rollback record": ("triton-release.rollback.<channel>", lambda tag: tag.startswith("triton-release.")),
}


def owned_family(tag: str) -> str | None:
    """The name of the tool's tag family `tag` belongs to (or would collide with), else None."""
    for name, (_, test) in FAMILIES.items():
        if test(tag):
            return name
    return None


def parse_release(text: str) -> semver.Version | None:
    """The release version X.Y.Z (semver, no leading zeros) `text` is; None when it is not one."""
    match = _RELEASE.fullmatch(text) if isinstance(text, str) else None
    return semver.Version(*map(int, match.groups())) if match else None


def is_release_tag(tag: str) -> bool:
    return parse_release(tag) is not None


def looks_like_release(tag: str) -> bool:
    """X.Y.Z, or a look-alike with leading zeros (1.02.3) that would read as one."""
    return _RELEASE_LOOKALIKE.fullmatch(tag) is not None


def git_tag(version: semver.Version | str) -> str:
    """The git tag of a committed release: vX.Y.Z."""
    return f"{GIT_TAG_PREFIX}{version}"


def parse_git_tag(tag: str) -> semver.Version | None:
    """The release version of the git tag vX.Y.Z; None for any other tag."""
    return parse_release(tag[len(GIT_TAG_PREFIX) :]) if tag.startswith(GIT_TAG_PREFIX) else None


def is_moving_tag(tag: str) -> bool:
    """X.Y or X."""
    return _MOVING.fullmatch(tag) is not None


def provenance_tag(commit: str) -> str:
    """sha-<first 12 hex of the commit>."""
    return f"{PROVENANCE_PREFIX}{commit[:12]}"


def is_provenance_tag(tag: str) -> bool:
    return tag.startswith(PROVENANCE_PREFIX)


TAG_SETS = ("all", "version")  # the `tags` setting: what a release writes beside X.Y.Z


def moving_tags(version: semver.Version, commit: str | None, channel: str, tags: str = "all") -> list[str]:
    """The tags a release writes after X.Y.Z, in the order they are written: X.Y, X, sha-<12 hex>,
    the channel; with `tags` "version" (a write-once repository) only sha-<12 hex>, a tag that
    is new with each released commit and never moves."""
    if tags not in TAG_SETS:
        raise UsageError(f"tags {tags!r}: give all or version.")
    provenance = [provenance_tag(commit)] if commit else []
    if tags == "version":
        return provenance
    return [f"{version.major}.{version.minor}", f"{version.major}", *provenance, channel]


def is_tag(text: str) -> bool:
    """Whether `text` is a tag at all, as Docker and a registry take one."""
    return isinstance(text, str) and _TAG.fullmatch(text) is not None


def parse_digest(text: str) -> str | None:
    """The 64 hex digits of the digest sha256:<hex>; None when `text` is not one."""
    match = _DIGEST.fullmatch(text) if isinstance(text, str) else None
    return match["hex"] if match else None


def digest_hex(digest: str) -> str:
    """The 64 hex digits of the digest sha256:<hex>, which the caller holds as one; refused (a usage
    error) when it is not."""
    hex_ = parse_digest(digest)
    if hex_ is None:
        raise UsageError(f"{digest!r} is not a manifest digest (sha256: and 64 hex digits).")
    return hex_


def parse_digest_ref(ref: str) -> tuple[str, str] | None:
    """REPO@sha256:<64 hex> -> (REPO, sha256:<hex>); None for anything else."""
    match = _DIGEST_REF.fullmatch(ref) if isinstance(ref, str) else None
    return (match["repository"], match["digest"]) if match else None


def parse_tag_ref(ref: str) -> tuple[str, str] | None:
    """REPO:TAG (REPO is HOST[:PORT]/PATH) -> (REPO, TAG); None for anything else."""
    match = _TAG_REF.fullmatch(ref) if isinstance(ref, str) else None
    return (match["repository"], match["tag"]) if match else None


@dataclass(frozen=True)
class RepositoryName:
    """A registry repository as the user wrote it (`ref`, lower case) and as Docker resolves it:
    the registry (`docker.io` for Docker Hub, else HOST[:PORT]) and the repository's path there."""

    ref: str  # as written: what outputs, labels and messages show
    registry: str  # docker.io for Docker Hub, else HOST[:PORT]
    path: str  # on that registry: team/models; a one-component Docker Hub name is library/NAME

    @property
    def hub(self) -> bool:
        return self.registry == HUB

    @property
    def api_host(self) -> str:
        """Where the registry's v2 API answers: registry-1.docker.io for Docker Hub."""
        return HUB_API_HOST if self.hub else self.registry


def parse_repository(ref: str) -> RepositoryName | None:
    """A registry repository in lower case, without a tag or digest, read as Docker reads it: the
    first path component is the registry only when it holds a `.` or `:` or is `localhost`;
    `docker.io`, `index.docker.io` and no registry at all mean Docker Hub, where `models` is
    `library/models`. None for anything else."""
    if not isinstance(ref, str) or not ref.isascii() or len(ref) > 255:
        return None
    import docker.auth
    import docker.errors

    try:
        registry, path = docker.auth.resolve_repository_name(ref)
    except (docker.errors.InvalidRepository, IndexError):  # a scheme; an empty host (IndexError)
        return None
    if registry == HUB and "/" not in path:
        path = f"{HUB_LIBRARY}/{path}"
    if not _REGISTRY_HOST.fullmatch(registry) or not _REPOSITORY_PATH.fullmatch(path):
        return None
    return RepositoryName(ref, registry, path)


def same_repository(one: str, other: str) -> bool:
    """Whether two references name one repository as Docker resolves them (the daemon records
    `docker.io/team/models` as `team/models`)."""
    first, second = parse_repository(one), parse_repository(other)
    return first is not None and second is not None and (first.registry, first.path) == (second.registry, second.path)


def candidate_tag(revision: str) -> str:
    """The candidate's tag in the release repository: candidate-<first 12 hex of the commit>."""
    if not _COMMIT.fullmatch(revision or ""):
        raise UsageError(f"{revision!r} is not a commit id; a candidate is named after the commit it was built from.")
    return f"{CANDIDATE_PREFIX}{revision[:12]}"


def is_candidate_tag(tag: str) -> bool:
    return _CANDIDATE.fullmatch(tag) is not None


def is_shard_name(name: str) -> bool:
    """A name a shard result's tag can hold."""
    return isinstance(name, str) and _SHARD_NAME.fullmatch(name) is not None


def is_planned_shard_name(name: str) -> bool:
    """A name a shard plan makes: shard-1, shard-2, ..."""
    return isinstance(name, str) and _PLANNED_SHARD_NAME.fullmatch(name) is not None


def shard_result_tag(candidate: str, shard: str) -> str:
    """The tag of the result of `shard` for the candidate whose manifest digest is `candidate`."""
    hex_ = parse_digest(candidate)
    if hex_ is None:
        raise UsageError(f"{candidate!r} is not a candidate's manifest digest (sha256: and 64 hex digits).")
    if not is_shard_name(shard):
        raise UsageError(
            f"shard {shard!r}: a shard name is letters, digits, '_', '.', '-' (up to 49), such as shard-1."
        )
    return f"sha256-{hex_}.golden-{shard}"


def parse_shard_result_tag(tag: str) -> tuple[str, str] | None:
    """sha256-<hex>.golden-<shard> -> (the candidate's digest sha256:<hex>, the shard); None for any
    other tag."""
    match = _SHARD_RESULT_TAG.fullmatch(tag) if isinstance(tag, str) else None
    return (f"sha256:{match['hex']}", match["shard"]) if match else None


def ledger_entry_tag(version: str, phase: str, digest: str) -> str:
    """The tag of one ledger entry: release `version` entered (`digest`: the build's image
    configuration) or confirmed (`digest`: the manifest X.Y.Z names), written once."""
    if parse_release(version) is None or phase not in LEDGER_PHASES:
        raise UsageError(f"a ledger entry names a release X.Y.Z and entered or confirmed, not {version!r} {phase!r}.")
    return f"{LEDGER_PREFIX}{version}.{phase}-{digest_hex(digest)[:12]}"


def parse_ledger_entry_tag(tag: str) -> tuple[str, str, str] | None:
    """triton-release.ledger.<X.Y.Z>.<phase>-<12 hex> -> (X.Y.Z, phase, the 12 hex); None for any
    other tag (the single ledger tag of old included)."""
    match = _LEDGER_ENTRY.fullmatch(tag) if isinstance(tag, str) else None
    return (match["version"], match["phase"], match["hex"]) if match else None


def is_ledger_tag(tag: str) -> bool:
    """The ledger's tag of old, or a tag of its family (a look-alike too, which a channel must not be)."""
    return tag == LEDGER_TAG or tag.startswith(LEDGER_PREFIX)


def rollback_tag(channel: str) -> str:
    return f"{ROLLBACK_PREFIX}{channel}"


def evidence_tag(digest: str) -> str:
    """The tag of the attestations (release evidence) of the manifest `digest`, as cosign names it."""
    return f"sha256-{digest_hex(digest)}{ATTESTATIONS_SUFFIX}"


def is_artifact_tag(tag: str) -> bool:
    """A tag of the sha256-<hex>... family: a shard result or evidence beside a manifest, never an
    image of its own (a look-alike too, which a channel must not be)."""
    return tag.startswith("sha256-")


def evidence_subject(tag: str) -> str | None:
    """The manifest digest whose evidence (or cosign signature, or SBOM) `tag` holds; None when it
    is not such a tag."""
    match = _EVIDENCE.fullmatch(tag) if isinstance(tag, str) else None
    return f"sha256:{match['hex']}" if match else None


def lower_cased(ref: str) -> str:
    """A registry repository HOST/NAME as Docker names it: lower case. Docker refuses upper case in a
    repository's path, and a host name is case-insensitive, so `ghcr.io/MyOrg/Models` (what
    `ghcr.io/${{ github.repository }}` gives) is `ghcr.io/myorg/models`, as docker/metadata-action
    does; `Team/Models` is Docker Hub's `team/models`. Anything else, a tag included, is returned as
    given, for `RegistryRepository.parse` to refuse."""
    typed = isinstance(ref, str) and ref.isascii()  # not by way of a non-ASCII letter whose lower case is ASCII
    return ref.lower() if typed and parse_repository(ref.lower()) is not None else ref
