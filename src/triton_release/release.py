"""The release: validate, changed, bump, build, test, then push, tags, commit and retain; and the
rollback of a channel.

Two halves with a different answer to failure:
- Until X.Y.Z is in the registry, a failure undoes the bump: the working tree is left as it was,
  and nothing is published.
- Once X.Y.Z is in the registry the release is published, and nothing is rolled back. The
  steps after it are idempotent: a rerun resumes the push of the same image, and a rerun that
  finds nothing new points the newest release's moving tags at it and applies `--keep`.
- The new layers go up as soon as the build wrote them, while the daemon loads the image and the
  golden cases run (registry/upload.py), and no manifest names them until the push, after every
  case passed: a refused release tags nothing, stops the upload and says how many unreferenced
  blobs it left for the registry's garbage collection.
- The evidence (evidence/) is attached right after the push, before any moving tag: a run that
  stops between the two leaves X.Y.Z without evidence and the channel where it was. The rerun of
  that commit finds nothing new, runs X.Y.Z's golden cases again against its digest, attaches
  the evidence that run makes, and then moves the tags.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release import steps
from triton_release.cache import exclusive
from triton_release.contract import CANDIDATE_TAG
from triton_release.errors import Interrupted
from triton_release.evidence import attach
from triton_release.evidence.statements import EvidenceOptions
from triton_release.history import releases
from triton_release.history.commit import commit, refuse_pending
from triton_release.history.git import Git
from triton_release.history.journal import Journal
from triton_release.history.planned import ChangesResult
from triton_release.history.push_back import PushTarget, push_release
from triton_release.history.worktree import Export
from triton_release.image.prepared import Prepared
from triton_release.models.gates import NO_GATES, GateOptions
from triton_release.models.repository import Repository
from triton_release.processes import wait_removed
from triton_release.registry import publish
from triton_release.registry import rollback as channels
from triton_release.registry.upload import BackgroundUpload
from triton_release.session import Session
from triton_release.settings import ImageOptions, PublishOptions, ServerOptions

if TYPE_CHECKING:
    from triton_release.console import Console
    from triton_release.history.journal import Recovered
    from triton_release.image.pull import BackgroundPull
    from triton_release.image.tidy import Tidied
    from triton_release.registry.client import RegistryRepository
    from triton_release.steps.build import ReleaseImage


@dataclass(frozen=True)
class ReleaseRequest:
    model_repository: Path
    repository: RegistryRepository | None  # None: --no-push without a registry (pull requests)
    base: str | None
    head: str
    image: ImageOptions  # what the image is built from and how
    publish: PublishOptions  # its channel, the releases kept, whether the release commit is pushed
    push: bool
    commit: bool
    server: ServerOptions = ServerOptions()  # how tritonserver runs the golden cases
    source: str = ""  # the source repository's URL, for the image's label
    gates: GateOptions = NO_GATES  # drift and latency bounds on each new version (models/gates.py)
    push_target: PushTarget = PushTarget()  # with commit and publish.push_commit: where the release commit goes
    evidence: EvidenceOptions = (
        EvidenceOptions()
    )  # how it is signed, who built it, the settings it records; default unsigned
    junitxml: str | None = None  # also write the golden results there as JUnit XML


def local_candidate(request: ReleaseRequest, git: Git) -> str:
    """The local tag of the build: the registry repository's, else one made from the checkout's
    folder name (any name: only lower-case letters and digits joined by '-' are kept)."""
    local = "-".join(re.findall(r"[a-z0-9]+", git.cwd.name.lower()))[:64] or "models"
    return f"{request.repository or 'triton-release/' + local}:{CANDIDATE_TAG}"


def prepare(
    session: Session,
    root: Path,
    planned: ChangesResult,
    scratch: Path,
    image: ImageOptions,
    repository: RegistryRepository | None,
    *,
    bumped: bool,
    pull: BackgroundPull | None = None,
    room_checked: bool = False,
) -> tuple[Export, Repository, Prepared, list[str], str | None]:
    """The first half a release and a stage share, once the changes are planned: the commit exported
    (with its bump), each model's environment resolved against the base, and the models to test and
    the version once those whose environment changed since the last release count as changed. With
    `pull`, the base's pull started beside the steps before: waited for (the step `pull`) once the
    export is done, as the environments inspect the base; when this machine's cache holds the
    inspection of the image the registry named (image/pull.py), the environments are resolved
    beside the pull too, and the pull, waited for after them, must bring that image."""
    console = session.console
    shipped = session.step("export", console.exported, steps.export, root, planned, scratch, bumped=bumped)
    exported = Repository.load(shipped.root, lazy=True)  # read once, by the steps that follow
    ahead = pull.ahead() if pull is not None else None
    if pull is not None and ahead is None:
        session.step("pull", console.pulled, pull.wait, console.line)
    prepared = session.step(
        "environments",
        console.environments,
        steps.environments,
        exported,
        image,
        registry=repository,
        previous=planned.released_before,
        inspected=ahead,
        room_checked=room_checked,
    )
    if pull is not None and ahead is not None:
        session.step("pull", console.pulled, pull.wait, console.line, inspected=ahead)
    assert planned.plan is not None
    to_test, version = planned.with_environment_changes(prepared.changed, planned.plan.version)
    return shipped, exported, prepared, to_test, version


@contextmanager
def one_at_a_time(repository: RegistryRepository, console: Console) -> Iterator[None]:
    """One release of `repository` at a time on this machine (a release, a stage, a promote): they
    share the local build tag and move the registry's tags; a second one waits, saying so."""
    with exclusive(f"release {repository}", lambda: console.waiting(f"another release of {repository}")):
        yield


# What the test step imports of other projects (tritonclient's gRPC client, pytest: a few tenths of
# a second of a 2-core runner), imported in a thread beside the steps before it, which wait on git
# and the Docker daemon and import none of them (no module is imported by both threads at once).
# Never tritonclient.http: gevent's hub would take its default loop, the one that checks for
# signals, in that thread, and a signal during an HTTP golden case would wait for the case.
# One that fails there is imported again by the step, which then says why.
TEST_IMPORTS = ("tritonclient.grpc", "pytest")


def import_beside(names: Iterable[str]) -> threading.Thread:
    """Import the modules `names` in a daemon thread (returned, started), each failure left for
    its real import."""

    def run() -> None:
        for name in names:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=run, name="triton-release-imports", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class Made:
    """What a release that built made on the Docker daemon, for `tidy` once it is done: the build's
    local tag (kept: the next build reads its layers), the tested build when the release relabeled
    it, and the REPO:X.Y.Z tag of a push."""

    kept: str
    image: str  # the image built (and, relabeled, released)
    tested: str = ""  # the build the golden cases ran against, when `image` is its relabeling
    version_tag: str = ""  # REPO:X.Y.Z, once pushed


def tidy(made: Made) -> Tidied:
    """Remove what the release made on the daemon but its build under `made.kept` (image/tidy.py).
    Never fails the release: what could not be removed is listed, with why."""
    from triton_release.image.engine import docker_client  # docker: only once a release built
    from triton_release.image.tidy import Tidied, remove_untagged, untag

    try:
        client = docker_client()
        found = Tidied(kept=made.kept)
        if made.version_tag:
            found += untag(client, made.version_tag, made.image)
        if made.tested:
            found += remove_untagged(client, [made.tested], keep=[made.image])
        return found
    except Exception as exc:  # cleanup never masks the release's outcome
        return Tidied(left=((made.image, f"not tidied: {exc}"),), kept=made.kept)


def run_release(request: ReleaseRequest, session: Session) -> None:
    releases.check_channel(request.publish.channel)  # every argument checked before the first side effect
    if request.commit:  # a merge or rebase under way: the release commit could not be made once the image is out
        refuse_pending(request.model_repository)
    try:
        if not (request.push and request.repository is not None):
            made = _release(request, session)
        else:
            with one_at_a_time(request.repository, session.console):
                made = _release(request, session)
    finally:  # the test server, removed beside the push: gone before the release ends
        wait_removed()
    if made is not None:  # after the server is gone: it held the tested build
        session.step("tidy", session.console.tidied, tidy, made)


def _release(request: ReleaseRequest, session: Session) -> Made | None:
    console, facts = session.console, session.report.facts
    root, repository = request.model_repository, request.repository

    recovered = None
    if Journal.left_in(root):  # a run killed with its bump in the working tree: finish it first
        recovered = session.step("recover", console.recovered, steps.recover, root, repository)
    session.step(
        "validate",
        console.validation,
        steps.validate,
        root,
        requirements_options=request.image.requirements_options,
        custom_backends=request.image.custom_backends,
    )
    planned = session.step(
        "changed", console.changes, steps.changes, root, request.base, head=request.head, registry=repository, plan=True
    )
    assert planned.plan is not None
    version = planned.plan.version
    if version is None and not planned.to_test:
        facts["released"] = False
        left_out = (
            f" ({len(planned.uncommitted)} uncommitted path(s) left out, named above)" if planned.uncommitted else ""
        )
        console.not_released(f"no model changed: nothing built, nothing pushed{left_out}")
        if request.push and repository is not None:
            session.step(
                "evidence",
                console.evidence,
                steps.finish_evidence,
                repository,
                root,
                planned.found.head,
                request.evidence.signing,
                request.evidence.invocation,
                request.evidence.settings,
                server_options=request.server,
            )
            session.step(
                "finish",
                console.finished,
                publish.finish_interrupted,
                repository,
                request.publish.channel,
                tags=request.publish.tags,
            )
            if request.commit:
                committed = session.step("commit", console.committed, steps.finish_commit, root, repository)
                if committed is not None and request.publish.push_commit:
                    session.step("push-back", None, push_release, root, committed, request.push_target)
            if request.publish.keep is not None:
                keep = request.publish.keep
                session.step("retain", console.retained, publish.retain, repository, keep, request.publish.channel)
        return None

    import_beside(TEST_IMPORTS)
    pull = start_pull(request.image.base_image, root)  # beside the bump and the export
    try:
        return _build_and_publish(request, session, recovered, planned, pull)
    finally:
        if pull is not None:  # a release that stops before it needed the base ends the pull
            pull.stop()


def start_pull(base_image: str, root: Path) -> BackgroundPull | None:
    """The base's pull, started in the background when the daemon does not hold it (image/pull.py),
    once the daemon's disk is known to hold it and the release (steps/build.py's room_for)."""
    from triton_release.image import pull
    from triton_release.image.engine import docker_client
    from triton_release.steps.build import room_for

    client = docker_client()
    room_for(client, base_image, root)
    return pull.start_if_missing(base_image, client, expected_id)


def expected_id(image: str) -> str:
    """The id the daemon gives `image` once pulled, as its registry names it now (its config's
    digest); "" when the registry does not say (the environments then wait for the pull)."""
    import os

    from triton_release.registry.sizes import config_digest

    try:
        return config_digest(image, os.environ)
    except Exception:  # unknown: the environments wait for the pull, as without a cache
        return ""


def _build_and_publish(
    request: ReleaseRequest,
    session: Session,
    recovered: Recovered | None,
    planned: ChangesResult,
    pull: BackgroundPull | None,
) -> Made | None:
    console, facts = session.console, session.report.facts
    root, repository = request.model_repository, request.repository
    version = planned.plan.version if planned.plan is not None else None
    # -- undone on failure, until X.Y.Z is in the registry ------------------------------------
    bumped = pushing = False
    run = None  # a change that only removes models has nothing to test
    upload: BackgroundUpload | None = None  # the new layers sent while the daemon loads them and the tests run
    sbom: attach.SbomBeside | None = None
    tars = tempfile.TemporaryDirectory(prefix="triton-release-tars-")  # the new layers' tars, until pushed
    overlap = (
        request.push and repository is not None and request.publish.upload_during_tests
    )  # off: the daemon pushes after
    try:
        bump = session.step(
            "bump",
            console.bumped,
            steps.bump,
            root,
            planned,
            release=str(repository) if request.push and repository is not None else "",
            held_is_ours=recovered is not None and recovered.action == "dropped",
        )
        bumped = bump.written  # a bump found in the working tree is left as found
        git = Git(Git(root).toplevel())
        with tempfile.TemporaryDirectory(prefix="triton-release-") as scratch:
            shipped, exported, prepared, to_test, version = prepare(
                session,
                root,
                planned,
                Path(scratch),
                request.image,
                repository,
                bumped=True,
                pull=pull,
                room_checked=True,
            )
            if request.push and version is not None:  # its SBOM written while the image is built and tested
                sbom = attach.SbomBeside(prepared, {m.name: list(m.versions) for m in exported})

            def upload_now(diff_ids: Sequence[str], written: Mapping[str, Path]) -> None:
                """The new layers go up as soon as their tars are written, beside the daemon's load;
                an upload of other layers (the build wrote them again) gives way to this one."""
                nonlocal upload
                if repository is None or version is None:
                    return
                if upload is not None:
                    if upload.diff_ids == list(diff_ids) and upload.tars == dict(written):
                        return
                    upload.stop()  # what it sent is reused by the next (this machine's cache names it)
                upload = BackgroundUpload(repository, diff_ids, written, planned.released_before)
                upload.start()  # started once `upload` names it: a signal now still finds it to stop

            from triton_release.image.build import LayersOut  # docker: only once a release builds

            built = session.step(
                "build",
                console.built,
                steps.build,
                exported,
                request.image,
                local_candidate(request, git),
                revision=planned.found.head,
                source=request.source,
                version=version or "",
                bumped_from=planned.found.base,
                channel=request.publish.channel,
                prepared=prepared,
                blob_ids=shipped.blob_ids,
                extra_labels=planned.record_label(),
                layers_out=LayersOut(Path(tars.name), upload_now) if overlap else None,
            )
            image = built.image_id
            prepared = built.prepared  # with the stub compiled during the build, for the provenance
            if to_test:  # a change that only removes models has nothing to test
                run = session.step(
                    "test",
                    console.golden_run,
                    steps.test,
                    exported,
                    built.image_id,
                    to_test,
                    server_options=request.server,
                    shown_as=root,
                    new_versions=planned.new_versions,
                    drift_unmeasurable=prepared.drift_unmeasurable,
                    gates=request.gates,
                    built_here=True,
                    removed_beside=True,  # waited for as the release ends (run_release)
                    junitxml=request.junitxml,
                )
                if run.completed and version is not None:  # auto-complete models: their signatures, as served
                    signed = session.step(
                        "signatures",
                        console.signatures,
                        steps.signatures,
                        image,
                        local_candidate(request, git),
                        run,
                        planned,
                        prepared.previous_labels,
                        version,
                    )
                    image, version = signed.image_id, signed.version
                    facts["version"] = version
            steps.still_in_place(shipped, planned)
        if version is None or not request.push:
            facts["released"] = False
            console.not_released(
                "only golden cases changed: tested, nothing to release"
                if version is None
                else f"--no-push: {version} built and tested, not pushed"
            )
            if bumped:  # released nothing: the working tree is left as it was, ready for the next try
                _undo_bump(session, root, planned)
            return _made(built, image)
        assert repository is not None  # a push names its repository (the CLI and the action require it)
        pushing = True
        Journal.around(root).phase("pushing", version)
        pushed = session.step("push", console.pushed, publish.push, image, repository, version, upload=upload)
        if request.commit:
            Journal.around(root).phase("committing")
        else:
            Journal.around(root).end()  # published: the bump stays in the working tree, as asked
    except BaseException as exc:
        if sbom is not None:  # no evidence of this run's to write
            sbom.close()
        if pushing and repository is not None and version is not None and _maybe_published(exc, repository, version):
            if isinstance(exc, Interrupted):
                exc.published = version
        elif bumped:
            _undo_bump(session, root, planned)
        raise
    finally:
        _end_upload(session, upload, tars)

    # -- published: finished forward by a rerun, never rolled back -----------------------------
    try:
        # the evidence before the channel moves: an admission policy that wants it never sees the
        # channel on a release without it; a failure here is finished by a rerun (finish_evidence)
        evidence = request.evidence
        session.step(
            "evidence",
            console.evidence,
            attach.release,
            repository,
            pushed.digest,
            pushed.version,
            root=root,
            planned=planned,
            prepared=prepared,
            run=run,
            tested=list(to_test),
            signing=evidence.signing,
            invocation=evidence.invocation,
            settings=evidence.settings,
            sbom_beside=sbom,
        )
        channel = request.publish.channel
        session.step(
            "tags",
            console.tagged,
            publish.tag_release,
            repository,
            version,
            planned.found.head,
            channel,
            pushed.digest,
            tags=request.publish.tags,
        )
        if request.commit:
            committed = session.step("commit", console.committed, commit, root, version, bump, planned.found.head)
            Journal.around(root).end()
            if request.publish.push_commit:  # after the registry's tags: the release is out, a refusal only warns
                session.step("push-back", None, push_release, root, committed, request.push_target)
        if request.publish.keep is not None:
            session.step("retain", console.retained, publish.retain, repository, request.publish.keep, channel)
    except Interrupted as exc:  # the release stands: the message says the rerun finishes it
        exc.published = version
        raise
    return _made(built, image, f"{repository}:{version}")


def _made(built: ReleaseImage, image: str, version_tag: str = "") -> Made:
    return Made(built.build.tag, image, built.image_id if image != built.image_id else "", version_tag)


def _maybe_published(error: BaseException, repository: RegistryRepository, version: str) -> bool:
    """Whether a failed push may have put X.Y.Z up: then the release is finished forward by a rerun,
    and the bump that it shipped stays. A push that failed before it sent any manifest put nothing
    up (X.Y.Z was not there when it began: else it resumes, or refuses). Else the registry is asked;
    unknown (it does not answer) counts as maybe."""
    from triton_release.registry.publish import manifest_sent  # docker's client: only once a push ran

    if getattr(error, "already_released", False):  # X.Y.Z is someone else's: ours never went up
        return False
    if manifest_sent(error) is False:  # it stopped while layers went up: no tag can name them
        return False
    return publish.published(repository, version) is not False


def _end_upload(session: Session, upload: BackgroundUpload | None, tars: tempfile.TemporaryDirectory) -> None:
    """Stop the upload beside the tests (no thread outlives the run) and remove the layers' tars;
    blobs it sent that no manifest names (a refused release) are said, the step "upload". A
    failure here is a warning, never the error reported."""
    try:
        if upload is not None:
            left = upload.stop()
            if not left.referenced and left.blobs:
                session.step("upload", session.console.unreferenced_blobs, lambda: left)
    except Exception as exc:
        session.console.warning(f"could not stop the upload beside the tests cleanly ({exc})")
    finally:
        tars.cleanup()


def _undo_bump(session: Session, root: Path, planned: ChangesResult) -> None:
    """Put the working tree back; a failure here is a warning, never the error reported."""
    try:
        session.step("undo-bump", None, steps.undo_bump, root, planned)
    except Exception as exc:
        session.console.warning(
            f"could not undo the bump ({exc}); the next run of triton-release in this "
            "checkout finishes the undo (its journal is kept under .git/)"
        )


@dataclass(frozen=True)
class RollbackRequest:
    repository: RegistryRepository
    version: str
    publish: PublishOptions  # the channel pointed back
    verify: bool = False
    model_repository: Path | None = None  # with verify: the golden cases' repository (and its git)
    server: ServerOptions = ServerOptions()  # with verify: how tritonserver runs its golden cases
    verify_key: str | None = None  # a public key: the target's evidence must verify with it first


def run_rollback(request: RollbackRequest, session: Session) -> None:
    """Point the channel at release X.Y.Z; with `verify_key`, only when its evidence verifies with
    it; with `verify`, only after its own golden cases pass."""
    releases.check_channel(request.publish.channel)
    releases.parse_version(request.version, "the version to roll back to")
    key = None
    if request.verify_key:
        from triton_release.evidence.signing import load_public_key

        key = load_public_key(request.verify_key, "verify_key")
    if key is not None:
        session.step(
            "check-evidence",
            session.console.evidence_checked,
            steps.check_evidence,
            request.repository,
            f"{request.repository}:{request.version}",
            key,
            version=request.version,
        )
    verified = None
    if request.verify:
        assert request.model_repository is not None  # with verify: the CLI and the action give it
        verified = session.step(
            "verify",
            session.console.golden_run,
            steps.verify_release,
            request.repository,
            request.version,
            request.model_repository,
            server_options=request.server,
        )
    session.step(
        "rollback",
        session.console.rolled_back,
        channels.rollback,
        request.repository,
        request.version,
        request.publish.channel,
        verified.to_json() if verified is not None else None,
    )
