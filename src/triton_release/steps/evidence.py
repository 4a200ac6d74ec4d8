"""Evidence finished and checked: the release's signed Statements attached after a run that pushed
and stopped (its golden cases run again), and a release's evidence checked with a key. Attaching
it right after a push, a stage or a promote is evidence/attach.py's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release import contract
from triton_release.contract import REVISION_LABEL
from triton_release.errors import Refused, UsageError
from triton_release.history import releases
from triton_release.history.git import Git
from triton_release.steps.golden import DEFAULT_SERVER
from triton_release.steps.verify import verify_release

if TYPE_CHECKING:
    from triton_release.evidence.attach import Evidence
    from triton_release.evidence.signing import PublicKey, Signing
    from triton_release.evidence.statements import Invocation
    from triton_release.evidence.verify import EvidenceCheck
    from triton_release.registry.client import RegistryRepository
    from triton_release.settings import ServerOptions


def finish_evidence(
    repository: RegistryRepository,
    root: Path,
    head: str,
    signing: Signing,
    invocation: Invocation,
    settings: Mapping,
    *,
    server_options: ServerOptions = DEFAULT_SERVER,
) -> Evidence | None:
    """The evidence of the newest release when the run that pushed it (from this commit) stopped
    before attaching it: its golden cases run again against its digest, then attached. None when
    there is nothing to finish. Golden cases that fail now are attached as failed, and refused."""
    from triton_release.evidence import attach

    versions = releases.versions_in(repository.tags())
    if not versions:
        return None
    version = str(versions[-1])
    digest = repository.digest(version)
    if digest is None or repository.digest(contract.evidence_tag(digest)) is not None:
        return None
    revision = (repository.image_config(version).get("config", {}).get("Labels") or {}).get(REVISION_LABEL)
    git = Git(Git(root).toplevel())
    tagged = git.run("rev-parse", "-q", "--verify", f"{contract.git_tag(version)}^{{commit}}", check=False)
    if not revision or revision not in (head, tagged.stdout.decode().strip() if tagged.returncode == 0 else ""):
        return None  # released from another commit: not this run's to finish
    from triton_release.registry.ledger import check_built_here

    check_built_here(repository, version, digest, revision)  # never signs what it did not build
    failure = None
    try:
        run = verify_release(repository, version, root, server_options=server_options)
    except UsageError:  # no golden case of its models here: attached as such
        run = None
    except Refused as exc:
        if exc.result is None:
            raise
        run, failure = exc.result, exc
    evidence = attach.rerun(
        repository, digest, version, root=root, run=run, signing=signing, invocation=invocation, settings=settings
    )
    if failure is not None:
        raise Refused(f"{failure.message} Its evidence, attached now, says so.", result=evidence)
    return evidence


def check_evidence(
    repository: RegistryRepository,
    reference: str,
    key: PublicKey,
    *,
    tag: str | None = None,
    digest: str | None = None,
    version: str | None = None,
) -> EvidenceCheck:
    """The evidence of REPO:TAG, REPO@DIGEST or release `version` checked with `key`; refused,
    naming every problem, unless every envelope verifies, every subject is the digest, every
    tested case passed (the golden results and the Test Results), and the SBOM and provenance
    are there."""
    from triton_release.evidence.verify import check
    from triton_release.registry.rollback import release_manifest

    if version is not None:
        digest = release_manifest(repository, version).digest  # an unknown version refused first
    elif digest is None:
        digest = repository.digest(tag or "")
        if digest is None:
            raise Refused(f"{repository}:{tag} does not exist, so it has no evidence to check.")
    return check(repository, reference, digest, key)
