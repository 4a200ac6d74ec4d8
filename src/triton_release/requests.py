"""One request builder per command, called by both doors (cli/ and action/): each request is made
here, and only here, from the settings, the values the command line or the action's inputs gave,
and the environment.

The environment stops here. What the code below needs of it is resolved now and handed down as
values: the registry credentials and TLS trust, the branch a release commit is pushed to, the signing (its key
read and checked, or the keyless prerequisites present) and the GitHub run, the latency options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from triton_release.errors import UsageError
from triton_release.evidence.statements import EvidenceOptions, Invocation
from triton_release.fanout.promote import PromoteRequest, gpu_policy
from triton_release.fanout.stage import CandidateTestRequest, StageRequest
from triton_release.history.push_back import PushTarget
from triton_release.models.gates import GateOptions
from triton_release.models.shards import check_counts
from triton_release.registry.client import RegistryRepository, open_repository
from triton_release.registry.trust import Trust
from triton_release.release import ReleaseRequest, RollbackRequest
from triton_release.settings import CONFIG_FILE, Settings


@dataclass(frozen=True)
class Door:
    """Which door asks, and so how the user's fix names what to give: a flag of the CLI, or an
    input of the action (which also gives registry credentials of its own)."""

    action: bool = False
    username: str | None = None
    password: str | None = None

    def where(self, flag: str, name: str) -> str:
        """`flag` on the command line; the input `name` in the action."""
        return f"the action's input {name}" if self.action else flag


CLI = Door()


def release_request(
    settings: Settings,
    *,
    base: str | None,
    head: str,
    push: bool,
    commit: bool,
    env: Mapping[str, str],
    door: Door = CLI,
    junitxml: str | None = None,
) -> ReleaseRequest:
    """`release`: validate, changed, bump, build, test and, with `push`, push and sign; `junitxml`:
    where the test step also writes the golden results as JUnit XML."""
    return ReleaseRequest(
        model_repository=model_repository(settings, door),
        repository=repository(settings, env, door, "--to REPO", required=push),
        base=base,
        head=head,
        image=settings.image,
        publish=settings.publish,
        push=push,
        commit=commit,
        server=settings.server,
        gates=GateOptions.from_settings(settings, env),
        source=provenance_source(env),
        push_target=PushTarget.from_env(env),
        evidence=evidence(settings, env, door, test=True) if push else EvidenceOptions(),
        junitxml=junitxml,
    )


def rollback_request(
    settings: Settings, *, version: str, verify: bool, env: Mapping[str, str], door: Door = CLI
) -> RollbackRequest:
    """`rollback` of a channel to release `version`; with `verify`, after its golden cases pass."""
    found = repository(settings, env, door, "--repo REPO", required=True)
    assert found is not None
    return RollbackRequest(
        found,
        version,
        settings.publish,
        verify,
        model_repository(settings, door) if verify else None,
        settings.server,
        verify_key=settings.verify_key,
    )


def stage_request(
    settings: Settings,
    *,
    base: str | None,
    head: str,
    shards: int | None,
    max_models: int | None,
    env: Mapping[str, str],
    door: Door = CLI,
) -> StageRequest:
    """`stage`: the candidate built once, pushed, and planned into `shards` (or shards of at most
    `max_models` tested models each)."""
    check_counts(shards, max_models)
    found = repository(settings, env, door, "--to REPO", required=True)
    assert found is not None
    return StageRequest(
        model_repository=model_repository(settings, door),
        repository=found,
        base=base,
        head=head,
        image=settings.image,
        publish=settings.publish,
        shards=shards,
        max_models=max_models,
        source=provenance_source(env),
        evidence=evidence(settings, env, door),
    )


def candidate_test_request(
    settings: Settings,
    *,
    candidate: str,
    shard: str | None,
    models: tuple[str, ...],
    env: Mapping[str, str],
    door: Door = CLI,
    junitxml: str | None = None,
    keyword: str | None = None,
) -> CandidateTestRequest:
    """`test` of a staged candidate REPO@sha256:...: one shard of it (its record written to the
    registry), or the given models."""
    found, digest = staged(candidate, env, door, settings)
    return CandidateTestRequest(
        model_repository=model_repository(settings, door),
        repository=found,
        digest=digest,
        shard=shard,
        models=models,
        junitxml=junitxml,
        keyword=keyword,
        server=settings.server,
        gates=GateOptions.from_settings(settings, env),
    )


def promote_request(
    settings: Settings,
    *,
    candidate: str,
    version: str,
    commit: bool,
    env: Mapping[str, str],
    door: Door = CLI,
    keep_candidates: int = 0,
) -> PromoteRequest:
    """`promote`: the staged candidate becomes release `version` once every shard's record passed."""
    found, digest = staged(candidate, env, door, settings)
    return PromoteRequest(
        found,
        digest,
        version,
        settings.publish,
        keep_candidates,
        commit,
        model_repository(settings, door) if commit else None,
        gpu_models=gpu_policy(settings),
        evidence=evidence(settings, env, door, records=False),
    )


def evidence(
    settings: Settings, env: Mapping[str, str], door: Door, *, test: bool = False, records: bool = True
) -> EvidenceOptions:
    """The run's signing, its key read and checked before the first side effect; who builds (the
    CLI or the action) and the GitHub run; and the settings the provenance records: what shaped the
    build, with `test` what shaped the test too, none without `records`."""
    from triton_release.evidence.keyless import token_offered
    from triton_release.evidence.signing import prepare

    recorded: dict = {}
    if records:
        recorded["build"] = {**settings.image.to_json(), "channel": settings.publish.channel}
        if test:
            recorded["test"] = {**settings.server.to_json(), "max_drift": settings.max_drift}
        recorded["base_image"] = settings.image.base_image
    return EvidenceOptions(
        prepare(settings.signing, settings.signing_key, token_offered=token_offered(env)),
        Invocation.from_env(env, action=door.action),
        recorded,
    )


def model_repository(settings: Settings, door: Door = CLI) -> Path:
    """The folder of the `model_repository` setting."""
    root = Path(settings.model_repository)
    if not root.is_dir():
        raise UsageError(
            f"{root}: no such model repository. Give the folder holding your models: "
            f"{door.where('--model-repository DIR', 'model-repository')} (or model_repository: in {CONFIG_FILE})."
        )
    return root


def repository(
    settings: Settings, env: Mapping[str, str], door: Door, flag: str, *, required: bool
) -> RegistryRepository | None:
    """The registry repository of the `repository` setting with its credentials; `flag` names
    where the CLI takes it when it is required and missing."""
    if not settings.repository:
        if required:
            raise UsageError(
                f"A registry repository is required: give {door.where(flag, 'repository')} (or repository: in "
                f"{CONFIG_FILE}), e.g. ghcr.io/org/models."
            )
        return None
    return open_repository(settings.repository, env, door.username, door.password, trust=trust(settings, env))


def trust(settings: Settings, env: Mapping[str, str]) -> Trust:
    """What registries' TLS is verified against beside the system store: the registry_ca setting
    (read and checked now) and the daemon's certs.d (TRITON_RELEASE_DOCKER_CERTS_D in its place)."""
    return Trust.given(settings.registry_ca, env)


def staged(candidate: str, env: Mapping[str, str], door: Door, settings: Settings) -> tuple[RegistryRepository, str]:
    """A staged candidate REPO@sha256:...: its repository (with the credentials) and digest."""
    from triton_release.contract import parse_digest_ref
    from triton_release.registry.candidate import parse_reference

    found = parse_digest_ref(candidate)
    if found is None:
        if not door.action:
            parse_reference(candidate)  # raises, naming --candidate
        raise UsageError(
            f"the action's input candidate is {candidate!r}; give REPO@sha256:<64 hex digits>, "
            "the stage job's `candidate` output."
        )
    return open_repository(found[0], env, door.username, door.password, trust=trust(settings, env)), found[1]


def provenance_source(env: Mapping[str, str]) -> str:
    """The source repository's URL inside GitHub Actions, for the OCI source label."""
    server, name = env.get("GITHUB_SERVER_URL", ""), env.get("GITHUB_REPOSITORY", "")
    return f"{server}/{name}" if server and name else ""
