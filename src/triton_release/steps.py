"""The steps: one function each, returning a typed result. The single commands call them one by
one; `release` composes them. A step that refuses on its merits raises with its result attached,
so the console can still show what it found.

Modules that bring Docker, gRPC or pytest are imported inside the steps that need them, so that
`--version`, `validate` and `changed` start without them.
"""

from __future__ import annotations

import errno
import json
import logging
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.cache import write_atomic
from triton_release.errors import InfrastructureError, Refused, TritonReleaseError, UsageError, no_space
from triton_release.history import record as released_record
from triton_release.history import releases, worktree
from triton_release.history.bump import (
    STAGING,
    Carried,
    FolderBump,
    Written,
    apply_bumps,
    changed_paths,
    check_working_tree,
    checkout_at,
    extract_tree,
    fill_lfs_pointers,
    folder_writes,
    holds_bump,
    plan_bumps,
    same_as_tree,
    undo_bumps,
)
from triton_release.history.changes import Changes, ChangeSet
from triton_release.history.git import Git
from triton_release.history.journal import Entry, Journal
from triton_release.models.repository import Repository
from triton_release.models.validate import ValidationResult
from triton_release.models.validate import validate as validate_repository
from triton_release.problems import display_path
from triton_release.processes import alive
from triton_release.settings import ServerOptions

log = logging.getLogger("triton_release")
MODELS_LABEL = "triton-release.models"  # model -> its version folders, in the image
DEFAULT_SERVER = ServerOptions()

if TYPE_CHECKING:
    from triton_release.evidence.attach import Evidence
    from triton_release.evidence.signing import PublicKey, Signing
    from triton_release.evidence.statements import Invocation
    from triton_release.evidence.verify import EvidenceCheck
    from triton_release.image.base import BaseImage
    from triton_release.image.build import BuildResult
    from triton_release.image.environments import Environments
    from triton_release.image.stub import StubChoice
    from triton_release.image.warmup import Warmup
    from triton_release.models.latency import LatencyOptions
    from triton_release.models.shards import Shard
    from triton_release.models.suite import GoldenRun
    from triton_release.registry.candidate import Pulled, Staged
    from triton_release.registry.client import RegistryRepository
    from triton_release.registry.promote import CandidateCheck, CandidateRetention, Promoted
    from triton_release.registry.publish import Finished, PushResult, Retention, Tagged
    from triton_release.registry.records import GoldenRecord
    from triton_release.registry.rollback import ModelRollback, Rollback


# -- validate, changed, bump ------------------------------------------------------------------

def validate(root: Path, requirements_options: str = "refuse") -> ValidationResult:
    result = validate_repository(root, requirements_options)
    if not result.ok:
        first, more = result.problems[0], len(result.problems) - 1
        also = f" (and {more} more problem{'s' if more > 1 else ''}, listed above)" if more else ""
        raise Refused(f"{first}{also}. Fix it and run `triton-release validate` again.", result=result)
    return result


@dataclass(frozen=True)
class VersionPlan:
    previous: str | None
    previous_from: str          # registry | git tag | none
    version: str | None         # None: nothing to release


@dataclass(frozen=True)
class ChangesResult:
    found: ChangeSet
    bumps: tuple[FolderBump, ...]
    kind: releases.ReleaseKind
    base_from: str
    plan: VersionPlan | None = None  # release only: the version the change makes
    carried: tuple[Carried, ...] = ()  # released versions written from the registry's record
    # release only: model -> version -> git tree of the image it builds (history/record.py)
    record: Mapping[str, Mapping[int, str]] = field(default_factory=dict, repr=False)

    @property
    def to_test(self) -> list[str]:
        return self.found.to_test

    @property
    def writes(self) -> list[Written]:
        """Every version folder the bump writes: the new versions, and the carried ones."""
        return [*self.bumps, *self.carried]

    def record_label(self) -> dict[str, str]:
        record = {m: dict(vs) for m, vs in self.record.items()}
        return {released_record.LABEL: released_record.label(record)} if self.record else {}

    def to_json(self) -> dict:
        data = {"base": self.found.base, "base_from": self.base_from, "head": self.found.head,
                "changes": self.found.to_json(), "bumps": [b.to_json() for b in self.bumps],
                "release": self.kind.to_json(), "carried": [c.to_json() for c in self.carried]}
        if self.plan is not None:
            data.update({"previous_version": self.plan.previous, "previous_from": self.plan.previous_from,
                         "version": self.plan.version})
        return data

    def facts(self) -> dict:
        facts: dict = {"changed_models": sorted(self.found.models)}
        if self.plan is not None:
            facts["version"] = self.plan.version
        return facts


def changes(root: Path, base: str | None, head: str = "HEAD", *, registry: RegistryRepository | None = None,
            plan: bool = False) -> ChangesResult:
    """The change between `base` and `head`; without `base` and with `plan`, since the last release.
    With `plan`, also the version it makes (the previous release read from the registry)."""
    git = Git(Git(root).toplevel())
    base_from = "--base"
    if base is None and plan:
        base, base_from = releases.last_release_commit(registry, git, head)
    elif base is None:
        base_from = "no --base: a first release of every model"
    found = Changes(root).between(base, head)
    if not plan:
        bumps = plan_bumps(found)
        return ChangesResult(found, tuple(bumps), releases.release_kind(found, {b.model for b in bumps}), base_from)
    previous, source = releases.previous_release(registry.tags() if registry is not None else [], git)
    labels = (registry.image_config(str(previous)).get("config", {}).get("Labels") or {}) \
        if registry is not None and source == "registry" else {}
    shipped = released_record.parse(labels.get(released_record.LABEL))
    bumps = plan_bumps(found, edits=shipped is None)
    carried: tuple[Carried, ...] = ()
    head_record = released_record.trees_at(git, found.head, found.prefix)
    if shipped is not None:
        reconciled = released_record.reconcile(git, found, bumps, shipped, f"{registry}:{previous}", head_record)
        found, bumps, carried = reconciled.changes, list(reconciled.bumps), reconciled.carried
    record = released_record.shipped(git, found, head_record, [*bumps, *carried])
    kind = releases.release_kind(found, {b.model for b in bumps})
    version = releases.next_version(previous, kind.kind)
    version_plan = VersionPlan(str(previous) if previous else None, source, str(version) if version else None)
    return ChangesResult(found, tuple(bumps), kind, base_from, version_plan, tuple(carried), record)


@dataclass(frozen=True)
class BumpResult:
    prefix: str
    bumps: tuple[FolderBump, ...]
    undone: bool = False
    carried: tuple[Carried, ...] = ()

    def to_json(self) -> dict:
        return {"bumps": [b.to_json() for b in self.bumps], "carried": [c.to_json() for c in self.carried],
                "undone": self.undone}

    @property
    def folders(self) -> list[str]:
        """Every version folder the bump wrote, as git names them."""
        writes: tuple[Written, ...] = (*self.bumps, *self.carried)
        return [f"{self.prefix}/{b.model}/{v}" for b in writes for v in b.folders()]


def bump(root: Path, planned: ChangesResult, release: str = "") -> BumpResult:
    """The next version folders in the working tree; refused before touching anything when the
    working tree holds anything but the commit there. Journaled under .git/ until the run undoes
    it or ends with it (`release`: the registry repository it is for), so that a killed run's bump
    is finished by the next (`recover`)."""
    found = planned.found
    check_working_tree(found, planned.writes, root)
    if planned.writes:
        git = Git(Git(root).toplevel())
        journal = Journal(git)
        journal.begin(found.head, found.prefix, folder_writes(git, found, planned.writes), release)
        try:
            apply_bumps(found, planned.writes, root, git)  # all or nothing
        except BaseException:
            journal.end()
            raise
    return BumpResult(found.prefix, planned.bumps, carried=planned.carried)


def undo_bump(root: Path, planned: ChangesResult) -> BumpResult:
    undo_bumps(planned.found, planned.writes, root)
    journal_end(root)
    return BumpResult(planned.found.prefix, planned.bumps, undone=True, carried=planned.carried)


def journaled(root: Path) -> bool:
    """Whether a run left its journal in the git repository around `root`."""
    try:
        return Journal(Git(Git(root).toplevel())).path.exists()
    except TritonReleaseError:
        return False


def journal_phase(root: Path, phase: str, version: str = "") -> None:
    """How far the release got with its bump (history/journal.py)."""
    Journal(Git(Git(root).toplevel())).phase(phase, version)


def journal_end(root: Path) -> None:
    """The run ends with its bump, or without one: nothing for a next run to finish."""
    Journal(Git(Git(root).toplevel())).end()


@dataclass(frozen=True)
class Recovered:
    """What a run found of an earlier one that was killed with its bump in the working tree."""
    phase: str
    action: str          # undone | kept | tagged
    folders: tuple[str, ...]
    owner: str

    def to_json(self) -> dict:
        return {"phase": self.phase, "action": self.action, "folders": list(self.folders), "owner": self.owner}


def recover(root: Path, repository: RegistryRepository | None) -> Recovered | None:
    """Finish what a killed run left (its journal, history/journal.py): a bump never published is
    undone; one published is kept for its commit; a release commit left without its tag is tagged,
    and git's stale index.lock removed. None when no run was stopped; refused while it still runs."""
    git = Git(Git(root).toplevel())
    journal = Journal(git)
    entry = journal.read()
    if entry is None:
        return None
    who = f"pid {entry.owner.get('pid')} on {entry.owner.get('host')}"
    if alive(entry.owner, elsewhere=False):
        raise UsageError(f"""
            Another triton-release run ({who}) is bumping this checkout ({journal.path} says so). Wait
            for it to end, or stop it; a run that was killed is recognised and finished by the next.""")
    _remove_orphaned_servers()
    found = ChangeSet(None, entry.head, entry.prefix)
    folders = tuple(f"{entry.prefix}/{w.model}/{w.version}" for w in entry.writes)
    if entry.phase == "committing":
        action = _finish_release_commit(git, entry)
        journal.end()
        return Recovered(entry.phase, action, folders, who)
    if entry.phase == "pushing" and entry.release and entry.version:
        published_now = _published_from(git, entry, repository)
        if published_now is None:
            raise InfrastructureError(f"""
                A run ({who}) was stopped while pushing {entry.release}:{entry.version}, and the registry does
                not answer whether it went up; its bump stays in {', '.join(folders)}. Run again when the
                registry answers.""")
        if published_now:
            journal.end()
            return Recovered(entry.phase, "kept", folders, who)
    if git.text("rev-parse", "HEAD") != entry.head:
        if not changed_paths(git, list(folders)):  # a checkout since (actions/checkout cleans): nothing left
            journal.end()
            return Recovered(entry.phase, "gone", folders, who)
        raise Refused(f"""
            A run ({who}) was stopped with its bump of commit {entry.head[:12]} in {', '.join(folders)}, and
            {git.text("rev-parse", "--short", "HEAD")} is checked out now. Check {entry.head[:12]} out and run
            again (the bump is undone), or remove {journal.path} after restoring those folders by hand.""")
    undo_bumps(found, _undoable(git, entry, root), root)
    journal.end()
    return Recovered(entry.phase, "undone", folders, who)


def _remove_orphaned_servers() -> None:
    """The server a killed run left (image/server.py), before the rerun's own; no daemon, no servers."""
    from triton_release.image.engine import docker_client
    from triton_release.image.server import remove_orphans

    try:
        remove_orphans(docker_client(ping_timeout=5))
    except InfrastructureError:
        pass


def _undoable(git: Git, entry: Entry, root: Path) -> list[Written]:
    """The killed run's writes, each checked to hold what it wrote, what git holds, or nothing
    (a kill mid-bump): refused before anything is undone when someone changed one since."""
    for write in entry.writes:
        folder = root / write.model / str(write.version)
        for stale in (root / write.model).glob(".triton-release-*"):
            if STAGING.match(stale.name):
                shutil.rmtree(stale, ignore_errors=True)  # a staging folder of the killed run
        ours = not folder.exists() or same_as_tree(git, write.tree, folder)
        head = write.at_head and git.run("rev-parse", "-q", "--verify",
                                         f"{entry.head}:{entry.prefix}/{write.model}/{write.version}", check=False)
        if not ours and not (head and head.returncode == 0
                             and same_as_tree(git, head.stdout.decode().strip(), folder)):
            raise Refused(f"""
                {entry.prefix}/{write.model}/{write.version} changed after a run that bumped it was killed:
                it holds neither what that run wrote nor what git holds. Commit it or move it away, then run
                again: the rest of the bump is undone then.""")
    return list(entry.carried())


def _published_from(git: Git, entry: Entry, repository: RegistryRepository | None) -> bool | None:
    """Whether the killed run's X.Y.Z went up, built from its commit; None when the registry
    does not answer."""
    from triton_release.registry import publish
    from triton_release.registry.client import RegistryRepository

    registry = repository if repository is not None and str(repository) == entry.release \
        else RegistryRepository.parse(entry.release)
    try:
        if publish.published(registry, entry.version) is not True:
            return publish.published(registry, entry.version)
        labels = registry.image_config(entry.version).get("config", {}).get("Labels") or {}
    except InfrastructureError:
        return None
    return labels.get(releases.REVISION_LABEL) == entry.head


def _finish_release_commit(git: Git, entry: Entry) -> str:
    """A run killed inside `git commit` leaves git's index.lock; one killed before `git tag`, the
    commit without its tag. Both are finished here; a commit never made is left to be made by
    the next --commit (its bump stays, published)."""
    lock = Path(git.text("rev-parse", "--git-dir"))
    lock = (lock if lock.is_absolute() else git.cwd / lock) / "index.lock"
    lock.unlink(missing_ok=True)  # its writer is dead: the journal's owner was committing
    head = git.text("rev-parse", "HEAD")
    subject = git.text("log", "-1", "--format=%s")
    parent = git.run("rev-parse", "-q", "--verify", "HEAD^", check=False).stdout.decode().strip()
    if entry.version and subject == f"release {entry.version}" and parent == entry.head:
        tag = releases.git_tag(entry.version)
        if not git.has_commit(tag):
            git.run("tag", tag, head)
        return "tagged"
    return "kept"



@dataclass(frozen=True)
class Export:
    """The model repository as the release ships it: the released commit's files, bumped."""
    root: Path
    commit: str
    uncommitted: tuple[str, ...]  # what the working tree holds besides: not released
    in_place: bool = False        # the checkout itself, which is exactly that (history/worktree.py)
    unpacked_because: str = ""    # why the checkout could not be used in place
    # in place: the git object id of each file outside the bumped folders, by absolute path
    blob_ids: Mapping[str, str] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        return {"commit": self.commit, "uncommitted_not_released": list(self.uncommitted),
                "in_place": self.in_place, **({"unpacked_because": self.unpacked_because}
                                              if self.unpacked_because else {})}


def export(root: Path, planned: ChangesResult, dest: Path, *, bumped: bool = False) -> Export:
    """The commit's model repository with the bumps applied: what is built and tested, whatever
    the working tree holds (uncommitted edits are never shipped). The checkout itself when it is
    exactly that (`bumped`: the bump step applied the bumps to it); else unpacked under `dest`."""
    git = Git(Git(root).toplevel())
    found = planned.found
    why = "the version folders are bumped in the copy only"
    if bumped or not planned.writes:
        differs, blob_ids = worktree.in_place(git, found, planned.writes, Path(root))
        if not differs:
            return Export(Path(root), found.head, (), in_place=True, blob_ids=blob_ids)
        why = differs
    target = dest / "model_repository"
    try:
        extract_tree(git, found.head, found.prefix, target)
        apply_bumps(found, planned.writes, target, git)
        fill_lfs_pointers(git, target)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise no_space(dest, f"exporting commit {found.head[:12]} to build it") from None
    changed = git.run("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", found.prefix).stdout
    ours = worktree.bumped_folders(found.prefix, planned.writes)
    uncommitted = tuple(path for entry in changed.decode(errors="surrogateescape").split("\0") if len(entry) > 3
                        if not (path := entry[3:]).startswith(ours))
    if git.text("rev-parse", "HEAD") != found.head:
        uncommitted = ()  # the working tree is another commit: nothing of it is released
    return Export(target, found.head, uncommitted[:20], unpacked_because=why)


def still_in_place(shipped: Export, planned: ChangesResult) -> None:
    """Refuse when the checkout built in place changed while the release read it: the image
    would hold bytes that are not the commit's."""
    if not shipped.in_place:
        return
    git = Git(Git(shipped.root).toplevel())
    why = (worktree.differs(git, planned.found, planned.writes, shipped.root)
           or worktree.bumps_intact(git, planned.found, planned.writes, shipped.root))
    if why:
        raise Refused(f"The model repository changed while the release built and tested it in place ({why}): "
                      "the image may hold bytes that are not commit "
                      f"{planned.found.head[:12]}'s. Nothing was pushed. Leave the checkout alone and run again.")


# -- build ------------------------------------------------------------------------------------

from triton_release.contract import CANDIDATE_TAG  # noqa: F401 - read as steps.CANDIDATE_TAG


@dataclass(frozen=True)
class Prepared:
    """What the image is built on: the base, the stub, and each model's environment."""
    base: BaseImage
    stub: StubChoice
    environments: Environments
    changed: tuple[str, ...] = ()   # models whose environment differs from the last release's
    compared_with: str = ""         # that release, "" when none was compared
    previous_labels: dict = field(default_factory=dict, repr=False)  # that release's image labels

    def to_json(self) -> dict:
        return {"environments": self.environments.to_json(), "environment_changed_models": list(self.changed),
                "compared_with": self.compared_with}

    def facts(self) -> dict:
        return {"environment_changed_models": list(self.changed)} if self.changed else {}


def environments(root: Path | Repository, base_image: str, *, python: str | None = None, stub_mode: str = "auto",
                 requirements_options: str = "refuse", registry: RegistryRepository | None = None,
                 previous: str | None = None) -> Prepared:
    """Inspect the base, choose the stub, and resolve each model's requirements into its own
    environment; with `registry` and `previous`, name the models whose environment changed since
    that release (its image's label)."""
    from triton_release.image import base as baseimage
    from triton_release.image import stub
    from triton_release.image.engine import docker_client
    from triton_release.image.environments import LABEL, resolve

    repo = root if isinstance(root, Repository) else Repository.load(root)
    base = baseimage.inspect(docker_client(), base_image)
    choice = stub.choose(base, python, stub_mode)
    envs = resolve(repo, base.pythons[choice.target_python], base.glibc, options=requirements_options)
    for model, env in sorted(envs.by_model.items()):
        stub.refuse_numpy2(choice, env.packages.get("numpy", ""), f"model {model}'s environment",
                           f"numpy<2 in {display_path(env.requirements)}")
    if registry is None or previous is None:
        return Prepared(base, choice, envs)
    labels = registry.image_config(previous).get("config", {}).get("Labels") or {}
    changed = [m for m in envs.changed_since(labels.get(LABEL)) if m in repo]
    return Prepared(base, choice, envs, tuple(changed), f"{registry}:{previous}", dict(labels))


def with_environment_changes(planned: ChangesResult, prepared: Prepared,
                             version: str | None) -> tuple[list[str], str | None]:
    """The models to test and the version, once models whose environment changed count as
    changed: tested, not bumped, and at least a patch release."""
    extra = [m for m in prepared.changed if m not in planned.to_test]
    if extra and version is None:
        assert planned.plan is not None and planned.plan.previous is not None
        previous = releases.parse_version(planned.plan.previous, "the previous release")
        version = str(releases.next_version(previous, "patch"))
    return [*planned.to_test, *extra], version


def unmeasurable_drift(prepared: Prepared) -> dict[str, str]:
    """Models whose drift this image cannot measure: their environment changed since the last
    release, so version N would answer with N+1's environment, not the one it was released with."""
    return {m: f"its environment changed since {prepared.compared_with}: version N would run with the new "
               "environment here, so its drift cannot be measured" for m in prepared.changed}


def new_versions(planned: ChangesResult) -> tuple[str, ...]:
    """The models whose new version is compared with the one before (drift): bumped, given a new
    version folder, or added (reported as having none before). Nothing on a first release."""
    found = planned.found
    if found.base is None:
        return ()
    return tuple(sorted({b.model for b in planned.bumps} | {name for name, change in found.models.items()
                                                             if change.status == "added" or change.added_versions}))


@dataclass(frozen=True)
class ReleaseImage:
    """The built image and the decisions behind it."""
    build: BuildResult
    prepared: Prepared
    warnings: tuple[str, ...]
    warmup: Warmup | None = None  # warmup: golden: the model_warmup written into the image's configs

    @property
    def image_id(self) -> str:
        return self.build.image_id

    @property
    def base(self) -> BaseImage:
        return self.prepared.base

    @property
    def stub(self) -> StubChoice:
        return self.prepared.stub

    @property
    def environments(self) -> Environments:
        return self.prepared.environments

    def summary(self) -> str:
        envs = self.environments
        extra = (f", {len(envs.by_model)} model environments of {len(envs.distributions)} distributions"
                 if envs.by_model else "")
        return (f"{self.build.tag}: built FROM {self.base.image}, {len(self.build.layers)} layers "
                f"({self.build.sent} sent to the daemon){extra}; "
                f"{self.stub.summary()}")

    def to_json(self) -> dict:
        return {**self.build.to_json(), "stub": self.stub.to_json(), "base": self.base.to_json(),
                "environments": self.environments.to_json(), "warnings": list(self.warnings),
                **({"warmup": self.warmup.to_json()} if self.warmup is not None else {})}


def build(root: Path | Repository, base_image: str, tag: str, *, python: str | None = None, stub_mode: str = "auto",
          revision: str | None = None, source: str = "", version: str = "", bumped_from: str | None = None,
          channel: str = "", requirements_options: str = "refuse", prepared: Prepared | None = None,
          max_layers: int = 120, extra_labels: dict[str, str] | None = None,
          blob_ids: Mapping[str, str] | None = None, warmup: str = "off") -> ReleaseImage:
    """Inspect the base, choose the stub, resolve the environments (unless `prepared`), build, and
    prove the stub loads. `revision`: the commit built (default: the git HEAD around the model
    repository, if any). `extra_labels`: more labels for the image (a staged candidate's plan).
    `blob_ids`: files known to hold their committed content (`Export.blob_ids`). `warmup`
    "golden": the image's config copies get model_warmup from the golden inputs (image/warmup.py)."""
    from triton_release.image import environments as envs_in_image
    from triton_release.image import stub
    from triton_release.image.build import build_image
    from triton_release.image.engine import docker_client
    from triton_release.image.layers import Runtime

    repo = root if isinstance(root, Repository) else Repository.load(root)
    if revision is None:
        found = Git(repo.root).run("rev-parse", "HEAD", check=False)
        revision = found.stdout.decode().strip() if found.returncode == 0 else ""
    client = docker_client()
    if prepared is None:
        prepared = environments(repo, base_image, python=python, stub_mode=stub_mode,
                                requirements_options=requirements_options)
    base, choice, envs = prepared.base, prepared.stub, prepared.environments
    install = base.pythons[choice.target_python]
    warnings = list(choice.warnings)
    labels = {
        "org.opencontainers.image.created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        releases.REVISION_LABEL: revision,
        releases.BASE_LABEL: bumped_from or "",
        releases.CHANNEL_LABEL: channel,
        "org.opencontainers.image.source": source,
        "org.opencontainers.image.version": version,
        MODELS_LABEL: json.dumps({m.name: list(m.versions) for m in repo}, sort_keys=True),
        envs_in_image.LABEL: envs.label() if envs.by_model else "",
        "triton-release.python": choice.target_python,
        "triton-release.stub": f"{choice.provider}: {choice.origin}",
        **(extra_labels or {}),
    }
    items, configs = envs_in_image.environment_items(envs, repo)
    warmed = None
    if warmup == "golden":
        from triton_release.image.warmup import with_warmup

        configs, warmed = with_warmup(repo, configs)
        warnings += [f"{model}: no model_warmup written (warmup: golden): {why}" for model, why in warmed.left_out]
    runtime = Runtime(choice.stub_file, choice.builder_stage, extra=tuple(items), model_files=configs)
    built = build_image(repo, base_image, tag, {k: v for k, v in labels.items() if v}, client=client,
                        runtime=runtime, max_layers=max_layers, base_layers=base.layers or None,
                        blob_ids=blob_ids)
    stub.check_built(client, tag, install)
    return ReleaseImage(built, prepared, tuple(warnings), warmed)


# -- test, record -----------------------------------------------------------------------------

def test(root: Path | Repository, image: str, names: list[str], server_options: ServerOptions = DEFAULT_SERVER, *,
         junitxml: str | None = None, keyword: str | None = None, shown_as: Path | None = None,
         drift: tuple[str, ...] = (), max_drift: float | None = None,
         drift_unmeasurable: Mapping[str, str] | None = None,
         latency: LatencyOptions | None = None) -> GoldenRun:
    """Serve `image` with the models (and what they need) loaded, as `server_options` say; run their
    golden cases. More than its `max_loaded` models are tested in waves, in the same server.
    `shown_as`: the model repository the user knows, when `root` is an export of it: the cases'
    files are named as they are there. Without `gpus`, KIND_GPU models are loaded on the CPU, and
    one that fails there is reported untested (`gpu_models` "test") or refused ("require"). `drift`: models with a new version, whose golden inputs are
    also sent to their previous version once their cases passed (models/drift.py); a drift above
    `max_drift` refuses, after the golden cases; `drift_unmeasurable`: model -> why its drift
    cannot be measured in this image (reported so, never as 0). `latency`: those models' new and
    previous versions are then measured with perf_analyzer (models/latency.py); a slowdown beyond
    its bound refuses."""
    import time

    from triton_release.image.engine import docker_client
    from triton_release.image.server import TritonServer
    from triton_release.models.devices import image_cpu_overrides
    from triton_release.models.drift import DriftMeter, previous_version
    from triton_release.models.suite import (
        GoldenRun,
        deferred,
        load_cases,
        models_to_load,
        plan_waves,
        run_waves,
        wave_label,
    )

    repo = root if isinstance(root, Repository) else Repository.load(root)
    client = docker_client()
    shipped = _image_models(client, image)  # the image is the truth: the versions it holds
    load = {name: max(shipped[name]) if shipped.get(name) else version
            for name, version in models_to_load(repo, names).items()}
    load_cases(repo, names)  # every case file well-formed before any server starts
    waves = plan_waves(repo, names, server_options.max_loaded)
    environments = _image_environments(client, image)
    overrides = ({} if server_options.gpus else  # the image's configs
                 image_cpu_overrides(client, image, repo, load, environments))
    every = len(waves) == 1 and set(load) == set(repo.models) and not overrides
    previous = {name: previous_version(shipped.get(name) or repo[name].versions, load[name])
                for name in drift if name in load and name in names}
    analyzer, latency_note = _perf_analyzer(latency, [n for n, v in previous.items() if v is not None])
    started = time.monotonic()
    server = TritonServer.started_as(server_options, image, {m: load[m] for m in waves[0].load}, all_models=every,
                                     client=client, overrides=overrides, deferred=deferred(repo, load, overrides))
    server.wave = wave_label(1, len(waves))  # wave 1 loads as the server starts
    with server, _latency_meter(repo, server, client, image, previous, load, latency, analyzer,
                                environments) as timing:
        meter = DriftMeter(repo, server, previous, load, environments, drift_unmeasurable) if previous else None

        def after_wave(tested: list[str], found: list) -> None:
            assert meter is not None
            meter.after_wave(tested, found)
            if timing is not None:  # after drift: both versions are loaded side by side
                timing.after_wave(tested, found)

        cases, ran = run_waves(repo, server, waves, load, junitxml=junitxml, keyword=keyword, started=started,
                               after_wave=after_wave if meter else None)
        if any(not c.passed for c in cases):  # a server the daemon killed is no model's fault
            server.check_running("while its golden cases ran")
    if shown_as is not None:
        cases = [replace(c, path=str(_shown(Path(c.path), repo.root, shown_as))) for c in cases]
    run = GoldenRun(image, tuple(load), tuple(cases), tuple(n for n in names if not repo[n].golden_cases),
                    tuple(ran), server.peak_memory, tuple(sorted(server.on_cpu)),
                    tuple((n, server.unloadable[n]) for n in sorted(names) if n in server.unloadable),
                    tuple(sorted(server.completed.items())), tuple(meter.results) if meter else (),
                    _latency_run(latency, analyzer, latency_note, timing))
    if not run.passed:
        failed = run.failed
        raise Refused(f"""
            {len(failed)} of {len(run.cases)} golden cases failed in {image} (first: {failed[0].path}:
            {failed[0].message}). Fix the model or, if the new answer is right, the golden file.""", result=run)
    if max_drift is not None:
        _check_drift(run, max_drift)
    if run.latency is not None and run.latency.bound is not None:
        _check_latency(run, run.latency.bound)
    return run


def _perf_analyzer(options: LatencyOptions | None, measurable: list[str]):
    """perf_analyzer for the latency gate, and a note when it does not run: nothing to compare (a
    first release), or perf_analyzer missing while only measuring. Missing while a bound is asked
    for is an infrastructure failure (exit 3), before any server starts."""
    if options is None:
        return None, ""
    if not measurable:
        return None, ("no model has a version before its new one (a first release, or only new models): no "
                      "latency to compare" if options.max_increase is not None else "")
    from triton_release.models.perf_analyzer import PerfAnalyzerMissing, find

    try:
        return find(options.perf_analyzer, options.env), ""
    except PerfAnalyzerMissing as exc:
        if options.max_increase is None:
            return None, f"latency not measured: {exc}"
        raise InfrastructureError(f"--max-latency-increase {options.max_increase:g} asks for the latency gate, "
                                  f"and {exc}") from None


def _latency_meter(repo: Repository, server, client, image: str, previous: Mapping, load: Mapping,
                   options: LatencyOptions | None, analyzer, environments: Mapping):
    """The latency meter of the models with a version before (a context: its scratch folder is
    removed), or a null context when nothing is measured."""
    import contextlib

    if options is None or analyzer is None:
        return contextlib.nullcontext()
    from triton_release.models.devices import image_configs
    from triton_release.models.latency import LatencyMeter

    configs = image_configs(client, image, [n for n, v in previous.items() if v is not None])  # the image's copies
    return LatencyMeter(repo, server, previous, load, options, analyzer, configs, environments)


def _latency_run(options: LatencyOptions | None, analyzer, note: str, timing):
    if options is None:
        return None
    from triton_release.models.latency import LatencyRun

    return LatencyRun(options.max_increase, options.rounds, options.interval_ms, analyzer, note,
                      tuple(timing.results) if timing is not None else ())


def _check_latency(run: GoldenRun, bound: float) -> None:
    """Refuse a new version whose p50 latency interval lies wholly above 1 + `bound` of its
    previous version's (models/latency.py), naming both versions' figures."""
    assert run.latency is not None
    found = run.latency.refused
    if not found:
        return
    first = found[0]
    compared = first.deciding
    assert compared is not None
    others = f" (and {', '.join(m.model for m in found[1:])})" if len(found) > 1 else ""
    raise Refused(f"""
        Model {first.model}{others} version {first.version} is slower than version {first.previous}
        beyond max_latency_increase {bound:g} at concurrency {compared.concurrency}: p50
        {compared.after.p50_us / 1000:.2f} ms against {compared.before.p50_us / 1000:.2f} ms, p99
        {compared.after.p99_us / 1000:.2f} ms against {compared.before.p99_us / 1000:.2f} ms, throughput
        {compared.after.throughput:.0f} against {compared.before.throughput:.0f} infer/s; p50 ratio
        {compared.p50.estimate:.2f}x with the interval {compared.p50.low:.2f}x to {compared.p50.high:.2f}x
        over {compared.pairs} rounds each, wholly above {1 + bound:.2f}x. Nothing is released. If the new
        version must be slower, release it with a larger --max-latency-increase (the max_latency_increase
        setting, the action's input max-latency-increase) or without it; else make it faster.""", result=run)


def _check_drift(run: GoldenRun, bound: float) -> None:
    """Refuse a drift above `bound`: the largest relative difference of a model's new version
    from its previous one (models/drift.py)."""
    from triton_release.models.drift import over, show_fraction

    found = over(run.drift, bound)
    if not found:
        return
    first = found[0]
    worst = first.worst
    where = f" (output {worst.name}{': ' + worst.worst if worst.worst else ''})" if worst else ""
    others = f" (and {', '.join(d.model for d in found[1:])})" if len(found) > 1 else ""
    raise Refused(f"""
        Model {first.model}{others} drifted beyond max_drift {bound:g}: version {first.version} answers
        its golden inputs up to {show_fraction(first.max_rel_diff)} apart from version
        {first.previous}{where}. Nothing is released. If the change is intended, release it
        without --max-drift (the max_drift setting, the action's input max-drift) or with a larger
        bound; else fix the model.""", result=run)


@dataclass(frozen=True)
class Signed:
    """The tested image labelled with its auto-complete models' signatures, and the version they make."""
    image_id: str
    version: str
    kind: releases.ReleaseKind
    signatures: dict

    def to_json(self) -> dict:
        return {"image_id": self.image_id, "version": self.version, "release": self.kind.to_json(),
                "models": sorted(self.signatures)}


def sign(image: str, tag: str, run: GoldenRun, planned: ChangesResult, previous_labels: dict,
         version: str) -> Signed:
    """Label the tested image with the signatures its auto-complete models were served with (no
    layer changes), and count them in the release: a signature changed since the previous release
    can make it major."""
    from triton_release.image.build import relabel

    served = {name: sig for name, config in run.completed if (sig := releases.served_signature(config))}
    before = releases.signatures_from_label(previous_labels.get(releases.SIGNATURES_LABEL))
    given = {("base", m): s for m, s in before.items()} | {("head", m): s for m, s in served.items()}
    kind = releases.release_kind(planned.found, {b.model for b in planned.bumps}, given)
    if releases.ORDER[kind.kind] > releases.ORDER[planned.kind.kind] and planned.plan is not None:
        previous = releases.parse_version(planned.plan.previous) if planned.plan.previous else None
        version = str(releases.next_version(previous, kind.kind))
    else:
        kind = planned.kind
    current = {m: s for m, s in before.items() if m not in planned.found.removed} | served
    labels = {releases.SIGNATURES_LABEL: releases.signatures_label(current), "org.opencontainers.image.version": version}
    return Signed(relabel(image, labels, tag), version, kind, current)


def _image_models(client, image: str) -> dict[str, list[int]]:
    """The models and version folders an image built by this tool holds (its label); {} for others."""
    import docker

    try:
        text = (client.images.get(image).labels or {}).get(MODELS_LABEL, "")
        found = json.loads(text) if text else {}
    except (docker.errors.DockerException, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(name): [v for v in versions if isinstance(v, int)] for name, versions in found.items()
            if isinstance(versions, list)}


def _image_environments(client, image: str) -> dict[str, str]:
    """The models with their own environment in an image built by this tool (its label) -> that
    environment's path in the image; {} for others."""
    import docker

    from triton_release.image.environments import ENVS, LABEL

    try:
        text = (client.images.get(image).labels or {}).get(LABEL, "")
        found = json.loads(text) if text else {}
    except (docker.errors.DockerException, ValueError):
        return {}
    return {str(name): f"/{ENVS / str(name)}" for name in found} if isinstance(found, dict) else {}


def _shown(path: Path, root: Path, shown_as: Path) -> Path:
    try:
        return shown_as / path.resolve().relative_to(root.resolve())
    except ValueError:
        return path


@dataclass(frozen=True)
class Recorded:
    image: str
    written: tuple[str, ...]

    def to_json(self) -> dict:
        return {"image": self.image, "written": list(self.written)}


def record(root: Path, image: str, names: list[str], server_options: ServerOptions = DEFAULT_SERVER,
           overwrite: bool = False) -> Recorded:
    """Fill in the outputs of golden cases that have none with what the server answers; in waves
    of at most `max_loaded` models, as `test`. Without `gpus`, KIND_GPU models answer from the
    CPU; one that cannot load there is refused (there is no answer to record)."""
    from triton_release.image.engine import docker_client
    from triton_release.image.server import TritonServer
    from triton_release.models.answers import NotRecorded, recorded
    from triton_release.models.devices import image_cpu_overrides
    from triton_release.models.inference import ask
    from triton_release.models.suite import deferred, load_cases, models_to_load, plan_waves

    repo = Repository.load(root)
    todo = [c for c in load_cases(repo, names) if overwrite or c.unrecorded]  # unrecorded: "error": true too
    if not todo:
        return Recorded(image, ())
    written = []
    models = sorted({c.model for c in todo})
    load = models_to_load(repo, models)
    waves = plan_waves(repo, models, server_options.max_loaded)
    client = docker_client()
    overrides = ({} if server_options.gpus else
                 image_cpu_overrides(client, image, repo, load, _image_environments(client, image)))
    with TritonServer.started_as(replace(server_options, gpu_models="require"), image,
                                 {m: load[m] for m in waves[0].load}, client=client, overrides=overrides,
                                 deferred=deferred(repo, load, overrides)) as server:
        for wave in waves:
            server.switch_to({m: load[m] for m in wave.load})
            for case in (c for c in todo if c.model in wave.tested):
                decoupled = repo[case.model].decoupled
                exchange = ask(case, server.http_url, server.grpc_url, decoupled=decoupled)
                if exchange.failure:
                    raise Refused(f"{case.path}: inference failed ({exchange.failure}); nothing was written to it.")
                raw = json.loads(case.path.read_text(encoding="utf-8"))
                try:
                    recorded(case, raw, exchange.replies, decoupled, overwrite)
                except NotRecorded as exc:
                    raise Refused(f"{case.path}: {exc}. Nothing was written to it.") from None
                write_atomic(case.path, json.dumps(raw, indent=2, ensure_ascii=False) + "\n")
                written.append(str(case.path))
    return Recorded(image, tuple(written))


# -- push, retain, commit ---------------------------------------------------------------------

def push(image: str, repository: RegistryRepository, version: str) -> PushResult:
    from triton_release.image.engine import docker_client
    from triton_release.registry import publish

    return publish.push(docker_client(), image, repository, version)


def published(repository: RegistryRepository, version: str) -> bool | None:
    from triton_release.registry import publish

    return publish.published(repository, version)


def tag(repository: RegistryRepository, version: str, revision: str | None, channel: str,
        digest: str | None = None) -> Tagged:
    """The moving tags; with `digest` (the push's), only while X.Y.Z is still what was pushed."""
    from triton_release.registry import publish

    return publish.tag_release(repository, version, revision, channel, digest)


def retain(registry: RegistryRepository, keep: int, channel: str) -> Retention:
    from triton_release.registry import publish

    return publish.retain(registry, keep, channel)


def finish_interrupted(registry: RegistryRepository, channel: str) -> Finished:
    from triton_release.registry import publish

    return publish.finish_interrupted(registry, channel)


@dataclass(frozen=True)
class Committed:
    committed: bool
    tag: str
    commit: str
    version: str = ""

    def to_json(self) -> dict:
        return {"committed": self.committed, "tag": self.tag, "commit": self.commit}

    def facts(self) -> dict:
        return {"version": self.version} if self.version else {}


def commit(root: Path, version: str, bumped: BumpResult | None = None, revision: str | None = None) -> Committed:
    """Commit exactly the bumped version folders (N+1 new, N restored) as `release X.Y.Z`, nothing
    else the working tree or the index holds, and tag vX.Y.Z: that commit, or `revision` (the
    commit released) when there was nothing to commit."""
    git = Git(Git(root).toplevel())
    paths = bumped.folders if bumped is not None else []
    staged = False
    if paths:
        git.run("add", "--force", "--", *paths)  # exactly what git held, ignored patterns or not
        staged = git.run("diff", "--cached", "--quiet", "--", *paths, check=False).returncode != 0
    if staged:
        identity = []
        if git.run("config", "user.name", check=False).returncode != 0:
            identity = ["-c", "user.name=github-actions[bot]",
                        "-c", "user.email=41898282+github-actions[bot]@users.noreply.github.com"]
        git.run(*identity, "commit", "-q", "-m", f"release {version}", "--", *paths)
    tag = releases.git_tag(version)
    target = git.text("rev-parse", "HEAD") if staged or not revision else revision
    if not git.has_commit(tag):
        git.run("tag", tag, target)
    elif git.text("rev-parse", f"{tag}^{{commit}}") != target:
        log.warning(f"git tag {tag} already exists on another commit; it was left as it is")
    return Committed(staged, tag, target, version)


def finish_commit(root: Path, repository: RegistryRepository) -> Committed | None:
    """The commit and git tag of the newest release, when the run that pushed it stopped before
    making them: its bump is redone from the commits in its labels (bump is deterministic), on
    the checkout of the commit it was built from. None when there is nothing to finish."""
    versions = releases.versions_in(repository.tags())
    if not versions:
        return None
    version = str(versions[-1])
    git = Git(Git(root).toplevel())
    if git.has_commit(releases.git_tag(version)):
        return None
    labels = repository.image_config(version).get("config", {}).get("Labels") or {}
    revision, base = labels.get(releases.REVISION_LABEL, ""), labels.get(releases.BASE_LABEL, "")
    if not revision or git.text("rev-parse", "HEAD") != revision:
        log.warning(f"{repository}:{version} has no git tag {releases.git_tag(version)}; it was built from "
                    f"{revision[:12] or 'an unknown commit'}, not the checked-out commit, so its release commit is "
                    "not made here")
        return None
    released = f"{repository}:{version}"
    shipped = released_record.parse(labels.get(released_record.LABEL))
    planned = changes(root, base or None, revision) if shipped is None else as_recorded(root, revision, shipped,
                                                                                       released)
    return commit_shipped(root, version, planned, released)


def as_recorded(root: Path, revision: str, shipped: Mapping, released: str) -> ChangesResult:
    """The writes that make the checkout of `revision` hold every version folder as `released`
    shipped it (its record): the exact bump, whatever git kept of earlier ones."""
    git, repository = Git(Git(root).toplevel()), Changes(root)
    found = ChangeSet(None, repository.resolve(None, revision)[1], repository.prefix)
    held = released_record.trees_at(git, found.head, found.prefix)
    carried = tuple(Carried(model, version, tree, released, at_head=version in held.get(model, {}))
                    for model, versions in sorted(shipped.items()) if model in held
                    for version, tree in sorted(versions.items()) if held[model].get(version) != tree)
    return ChangesResult(found, (), releases.ReleaseKind(None, ()),
                         f"the record of {released}", carried=carried, record=dict(shipped))


def _holds_shipped_bump(root: Path, planned: ChangesResult, released: str) -> bool:
    """Whether the working tree holds the bump's folders already (a stopped run's bump); refused
    when it holds new ones with other contents than `released` shipped."""
    fresh = [f"{b.model}/{b.to_version}" for b in planned.bumps]
    fresh += [f"{c.model}/{c.version}" for c in planned.carried if not c.at_head]
    if not any((root / folder).exists() for folder in fresh):
        return False
    if not holds_bump(planned.found, planned.writes, root):
        raise Refused(f"""
            The working tree holds the new version folders of {released} with other contents than it
            shipped: {', '.join(fresh)}. Put them back as shipped (remove them and run again: the bump is
            redone), then commit the changes as a new release.""")
    return True


def commit_shipped(root: Path, version: str, planned: ChangesResult, released: str) -> Committed:
    """The bump `released` shipped, redone in the working tree from the same commits (bump is
    deterministic) unless it is there already, committed as `release X.Y.Z` and tagged."""
    bumped: BumpResult | None
    if _holds_shipped_bump(root, planned, released):
        bumped = BumpResult(planned.found.prefix, planned.bumps, carried=planned.carried)  # a stopped run's, untouched
    else:
        bumped = bump(root, planned) if planned.writes else None
    return commit(root, version, bumped, planned.found.head)


# -- promote: a staged candidate becomes the release --------------------------------------------

def check_candidate(repository: RegistryRepository, digest: str, version: str,
                    gpu_models: str = "require") -> CandidateCheck:
    """The candidate's labels and its shards' golden records; refused, naming every shard at
    fault, unless they let it become release `version` (`gpu_models` "test": GPU-only models
    may ship untested, said so)."""
    from triton_release.registry import promote

    return promote.check_candidate(repository, digest, version, gpu_models)


def plan_commit(root: Path, checked: CandidateCheck) -> ChangesResult:
    """The bump the candidate shipped, recomputed from its base and revision labels, checked
    against the working tree before anything is tagged: the candidate's commit must be checked
    out, and the version folders to bump hold nothing git does not (or this very bump)."""
    candidate = checked.candidate
    git = Git(Git(root).toplevel())
    if not candidate.revision:
        raise Refused(f"{candidate.ref} has no {releases.REVISION_LABEL} label, so its bump cannot be redone for "
                      "--commit. Promote it without --commit, or stage the commit again.")
    head = git.text("rev-parse", "HEAD")
    if head != candidate.revision:
        raise UsageError(f"""
            --commit makes the release commit on the candidate's commit {candidate.revision[:12]}, and
            {head[:12]} is checked out. Check out {candidate.revision[:12]} (actions/checkout with ref:
            and fetch-depth: 0), or promote without --commit. Nothing was tagged.""")
    planned = changes(root, candidate.base or None, candidate.revision) if candidate.record is None \
        else as_recorded(root, candidate.revision, candidate.record, candidate.ref)
    if not _holds_shipped_bump(root, planned, candidate.ref):
        check_working_tree(planned.found, planned.writes, root)
    return planned


def promote(repository: RegistryRepository, checked: CandidateCheck, version: str, channel: str) -> Promoted:
    from triton_release.registry import promote as promoting

    return promoting.promote(repository, checked, version, channel)


def retain_candidates(repository: RegistryRepository, released: str, keep: int) -> CandidateRetention:
    from triton_release.registry.promote import retain_candidates as retain_older

    return retain_older(repository, released, keep)


# -- stage and candidate tests: a release over many runners ------------------------------------

@dataclass(frozen=True)
class ShardPlan:
    shards: tuple[Shard, ...]

    def to_json(self) -> dict:
        return {"shards": [s.to_json() for s in self.shards]}

    def facts(self) -> dict:
        return {"shards": [s.matrix_entry() for s in self.shards]}


def plan_shards(root: Path | Repository, names: list[str], shards: int | None = None,
                max_models: int | None = None) -> ShardPlan:
    from triton_release.models.shards import plan_shards as plan

    repo = root if isinstance(root, Repository) else Repository.load(root)
    return ShardPlan(tuple(plan(repo, names, shards=shards, max_models=max_models)))


def find_candidate(registry: RegistryRepository, revision: str, base: str | None,
                   inputs: dict[str, str]) -> Staged | None:
    """The candidate staged before for this commit, base and build `inputs`, to reuse; None: stage it."""
    from triton_release.registry.candidate import find_reusable

    return find_reusable(registry, revision, base, inputs)


def push_candidate(image: str, registry: RegistryRepository, revision: str) -> Staged:
    from triton_release.image.engine import docker_client
    from triton_release.registry.candidate import push_candidate as push_to_candidate_tag

    return push_to_candidate_tag(docker_client(), image, registry, revision)


def pull_candidate(registry: RegistryRepository, digest: str) -> Pulled:
    from triton_release.image.engine import docker_client
    from triton_release.registry.candidate import pull_candidate as pull_by_digest

    return pull_by_digest(docker_client(), registry, digest)


@dataclass(frozen=True)
class RecordWritten:
    repository: str
    tag: str
    shard: str
    passed: bool
    cases: int

    def to_json(self) -> dict:
        return {"record": f"{self.repository}:{self.tag}", "shard": self.shard, "passed": self.passed,
                "cases": self.cases}


def write_golden_record(registry: RegistryRepository, record: GoldenRecord,
                        junit: bytes | None = None) -> RecordWritten:
    """The shard's outcome, kept in the registry beside the candidate for `promote` to read."""
    from triton_release.registry.records import write_record

    tag = write_record(registry, record, junit)
    return RecordWritten(str(registry), tag, record.shard, record.passed, len(record.cases))


# -- rollback ---------------------------------------------------------------------------------

def rollback(repository: RegistryRepository, version: str, channel: str = "latest",
             verified: GoldenRun | None = None) -> Rollback:
    from triton_release.registry.rollback import rollback as point_channel

    return point_channel(repository, version, channel, verified.to_json() if verified is not None else None)


def rollback_model(server: str, model: str, version: int) -> ModelRollback:
    from triton_release.registry.rollback import rollback_model as serve_version

    return serve_version(server, model, version)


def verify_release(repository: RegistryRepository, version: str, model_repository: Path,
                   server_options: ServerOptions = DEFAULT_SERVER) -> GoldenRun:
    """Pull release X.Y.Z and run the golden cases of the commit it was built from."""
    import docker

    from triton_release.image.engine import docker_client
    from triton_release.registry.rollback import release_manifest

    release_manifest(repository, version)  # an unknown version is refused before any pull
    image = f"{repository}:{version}"
    client = docker_client()
    credentials = repository.credentials
    try:
        client.images.pull(str(repository), tag=version, auth_config=credentials.docker_auth() if credentials else None)
    except docker.errors.APIError as exc:
        raise InfrastructureError(f"Could not pull {image} to verify it: {exc.explanation or exc}") from None
    labels = client.images.get(image).labels or {}
    models = sorted(json.loads(labels.get(MODELS_LABEL, "{}")))
    with tempfile.TemporaryDirectory() as tmp:
        root = checkout_at(model_repository, labels.get(releases.REVISION_LABEL, ""), Path(tmp))
        repo = Repository.load(root or model_repository)
        names = [m for m in models if m in repo]
        if not names:
            raise UsageError(f"""
                None of the models in {image} ({', '.join(models) or 'none listed in its labels'}) has golden
                cases here: its commit is not in this git repository and {model_repository} does not hold them.
                Fetch the history (fetch-depth: 0), or roll back without --verify.""")
        try:
            return test(repo, image, names, server_options)
        except Refused as exc:
            raise Refused(f"{image} fails its own golden cases; the channel was not moved. {exc.message}",
                          result=exc.result) from None


# -- evidence: the release's signed Statements, attached in the registry (evidence/) -------------

def attach_evidence(repository: RegistryRepository, pushed: PushResult, root: Path, planned: ChangesResult,
                    prepared: Prepared, run: GoldenRun | None, tested: list[str], signing: Signing,
                    invocation: Invocation, settings: Mapping, latency=None) -> Evidence:
    """The golden results, provenance and SBOM of the release just pushed, attached to its digest."""
    from triton_release.evidence import attach

    return attach.release(repository, pushed.digest, pushed.version, root=root, planned=planned, prepared=prepared,
                          run=run, tested=tested, signing=signing, invocation=invocation, settings=settings,
                          latency=latency)


def finish_evidence(repository: RegistryRepository, root: Path, head: str, signing: Signing,
                    invocation: Invocation, settings: Mapping,
                    server_options: ServerOptions = DEFAULT_SERVER) -> Evidence | None:
    """The evidence of the newest release when the run that pushed it (from this commit) stopped
    before attaching it: its golden cases run again against its digest, then attached. None when
    there is nothing to finish. Golden cases that fail now are attached as failed, and refused."""
    from triton_release import contract
    from triton_release.evidence import attach

    versions = releases.versions_in(repository.tags())
    if not versions:
        return None
    version = str(versions[-1])
    digest = repository.digest(version)
    if digest is None or repository.digest(contract.evidence_tag(digest)) is not None:
        return None
    revision = (repository.image_config(version).get("config", {}).get("Labels") or {}).get(releases.REVISION_LABEL)
    git = Git(Git(root).toplevel())
    tagged = git.run("rev-parse", "-q", "--verify", f"{releases.git_tag(version)}^{{commit}}", check=False)
    if not revision or revision not in (head, tagged.stdout.decode().strip() if tagged.returncode == 0 else ""):
        return None  # released from another commit: not this run's to finish
    failure = None
    try:
        run = verify_release(repository, version, root, server_options)
    except UsageError:  # no golden case of its models here: attached as such
        run = None
    except Refused as exc:
        if exc.result is None:
            raise
        run, failure = exc.result, exc
    evidence = attach.rerun(repository, digest, version, root=root, run=run, signing=signing, invocation=invocation,
                            settings=settings)
    if failure is not None:
        raise Refused(f"{failure.message} Its evidence, attached now, says so.", result=evidence)
    return evidence


def check_evidence(repository: RegistryRepository, reference: str, key: PublicKey, *, tag: str | None = None,
                   digest: str | None = None, version: str | None = None) -> EvidenceCheck:
    """The evidence of REPO:TAG, REPO@DIGEST or release `version` checked with `key`; refused,
    naming every problem, unless every envelope verifies, every subject is the digest, every
    tested case passed, and the SBOM and provenance are there."""
    from triton_release.evidence.verify import check
    from triton_release.registry.rollback import release_manifest

    if version is not None:
        digest = release_manifest(repository, version).digest  # an unknown version refused first
    elif digest is None:
        digest = repository.digest(tag or "")
        if digest is None:
            raise Refused(f"{repository}:{tag} does not exist, so it has no evidence to check.")
    return check(repository, reference, digest, key)


def stage_evidence(repository: RegistryRepository, staged: Staged, planned: ChangesResult, prepared: Prepared,
                   signing: Signing, invocation: Invocation, settings: Mapping) -> Evidence:
    from triton_release.evidence import attach

    candidate = staged.candidate
    return attach.stage(repository, candidate.digest, candidate.version, planned=planned, prepared=prepared,
                        signing=signing, invocation=invocation, settings=settings)


def promote_evidence(repository: RegistryRepository, checked: CandidateCheck, promoted: Promoted,
                     signing: Signing, invocation: Invocation) -> Evidence:
    from triton_release.evidence import attach

    return attach.promote(repository, promoted.digest, promoted.version,
                          records=[r for _, r in checked.records if r is not None], untested=checked.untested,
                          signing=signing, invocation=invocation)
