"""`doctor`: before anything is built, whether a release can run here, and what to fix where it
cannot. Each check is one row (ok, problem, or not checked and why); every row is run, so every
problem shows at once, and a check that needs another one's answer (the base's plan needs the
daemon) says which.

The rows: the Docker daemon; the base image (on the daemon, else pullable, and its download
size); its Triton, Python and stub plan (for a base not pulled yet, from its image configuration in
the registry: its Triton release, and where the stub would come from); the daemon's free disk against what the release needs;
the registry (reachable, TLS trusted, credentials found and from where, may push, may delete when
`keep` is set, the OCI 1.1 referrers API); perf_analyzer for the latency gate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.errors import Refused, TritonReleaseError

if TYPE_CHECKING:
    import docker

    from triton_release.registry.client import RegistryRepository
    from triton_release.settings.options import Settings

OK, PROBLEM, NOT_CHECKED = "ok", "problem", "not checked"
# every row, in the order they are printed (docs/cli.md's table names each)
ROWS = (
    "docker daemon",
    "base image",
    "stub plan",
    "daemon disk",
    "registry",
    "push",
    "delete (keep)",
    "referrers API",
    "perf_analyzer",
)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | problem | not checked
    detail: str
    fix: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True)
class Diagnosis:
    checks: tuple[Check, ...]

    @property
    def problems(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.status == PROBLEM)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"ok": self.ok, "checks": [check.to_json() for check in self.checks]}


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class _Rows:
    def __init__(self) -> None:
        self.rows: list[Check] = []

    def add(self, name: str, status: str, detail: str, fix: str = "") -> None:
        assert name in ROWS, name
        self.rows.append(Check(name, status, " ".join(detail.split()), " ".join(fix.split())))

    def run(self, name: str, check: Callable[[], str], fix: str = "") -> bool:
        """A row from `check`: its text when it returns, a problem with the error's message (which
        carries its own fix) when it raises."""
        try:
            self.add(name, OK, check())
            return True
        except TritonReleaseError as exc:
            self.add(name, PROBLEM, _message(exc), fix)
            return False


def doctor(
    settings: Settings, env: Mapping[str, str], registry: RegistryRepository | None, *, model_root: Path | None
) -> Diagnosis:
    """Every check's row; Refused (exit 1), with the rows attached, when any is a problem."""
    rows = _Rows()
    client = _daemon(rows, env)
    base_local = client is not None and _base(rows, client, settings, env)
    _disk(rows, client, settings, env, base_local, model_root)
    _registry(rows, registry, settings)
    _perf_analyzer(rows, settings, env)
    found = Diagnosis(tuple(rows.rows))
    if not found.ok:
        names = ", ".join(check.name for check in found.problems)
        raise Refused(f"A release cannot run here yet: {names}. Each line above says how to fix it.", result=found)
    return found


def _daemon(rows: _Rows, env: Mapping[str, str]) -> docker.DockerClient | None:
    from triton_release.image.engine import docker_client

    try:
        client = docker_client(env=env, ping_timeout=10)
    except TritonReleaseError as exc:
        rows.add("docker daemon", PROBLEM, _message(exc))
        return None
    version = client.version().get("Version", "?")
    rows.add("docker daemon", OK, f"Docker {version} answers")
    return client


def _base(rows: _Rows, client: docker.DockerClient, settings: Settings, env: Mapping[str, str]) -> bool:
    """The base image row and its plan's row; True when the base is on the daemon."""
    import docker as docker_sdk

    from triton_release.image import base as bases
    from triton_release.image.disk import gib
    from triton_release.image.stub import before_pull, choose

    image = settings.image.base_image
    try:
        client.images.get(image)
    except docker_sdk.errors.ImageNotFound:
        from triton_release.registry.sizes import Listing, listing

        listed: list[Listing] = []

        def listed_size() -> str:
            listed.append(listing(image, env))
            return f"{image}: not on the daemon; {gib(listed[0].size)} to download"

        if rows.run("base image", listed_size):
            # from the image configuration in the registry (its Env and Labels): no pull
            rows.run(
                "stub plan",
                lambda: before_pull(listed[0].release(), image, settings.image.python, settings.image.stub),
            )
        else:
            rows.add("stub plan", NOT_CHECKED, "the base image cannot be read")
        return False
    rows.add("base image", OK, f"{image}: on the daemon")

    def plan() -> str:
        found = bases.inspect(client, image)
        choice = choose(found, settings.image.python, settings.image.stub, settings.image.stub_sources or "")
        return f"{found.release.describe()}, python3 {found.python3 or 'none'}; {choice.summary()}"

    rows.run("stub plan", plan)
    return True


def _disk(
    rows: _Rows,
    client: docker.DockerClient | None,
    settings: Settings,
    env: Mapping[str, str],
    base_local: bool,
    model_root: Path | None,
) -> None:
    from triton_release.image import disk

    if client is None:
        rows.add("daemon disk", NOT_CHECKED, "no Docker daemon to ask")
        return
    image = settings.image.base_image
    compressed = None
    if not base_local:
        from triton_release.registry.sizes import pull_size

        try:
            compressed = pull_size(image, env)
        except TritonReleaseError:
            rows.add("daemon disk", NOT_CHECKED, f"the size of {image} is not known (see base image)")
            return
    needed = disk.need(compressed, disk.folder_bytes(model_root) if model_root else 0)
    free = disk.daemon_free(client, env, [image])
    if free.bytes is None:
        rows.add("daemon disk", NOT_CHECKED, f"{free.how}; this release needs about {disk.gib(needed.total)}")
    elif free.bytes < needed.total:
        rows.add("daemon disk", PROBLEM, disk.short_message(free, needed, image))
    else:
        rows.add("daemon disk", OK, f"{disk.gib(free.bytes)} free ({free.how}); {needed.describe()}")


def _registry(rows: _Rows, registry: RegistryRepository | None, settings: Settings) -> None:
    from triton_release.registry.permissions import has_referrers_api, may_delete, may_push

    if registry is None:
        rows.add("registry", NOT_CHECKED, "no repository given (--to, or repository: in the settings)")
        return
    who = (
        f"as {registry.credentials.username} ({registry.credentials.source})"
        if registry.credentials
        else "anonymously (no credentials found)"
    )
    if not rows.run("registry", lambda: f"{registry}: reachable, {len(registry.tags())} tags, read {who}"):
        return
    push = _permission(rows, "push", lambda: may_push(registry), who)
    if settings.keep is not None:
        _permission(rows, "delete (keep)", lambda: may_delete(registry), who)
    if push:
        referrers = has_referrers_api(registry)
        rows.add(
            "referrers API",
            OK,
            "answered: evidence is attached as OCI 1.1 referrers"
            if referrers
            else "not answered: evidence is found through the sha256-<hex> tag schema instead",
        )


def _permission(rows: _Rows, name: str, ask: Callable, who: str) -> bool:
    try:
        allowed = ask()
    except TritonReleaseError as exc:
        rows.add(name, PROBLEM, _message(exc))
        return False
    if allowed.allowed is None:
        rows.add(name, NOT_CHECKED, allowed.detail)
    elif allowed.allowed:
        rows.add(name, OK, f"{allowed.detail} {who}")
    else:
        rows.add(
            name,
            PROBLEM,
            f"{allowed.detail} {who}",
            "give credentials that may do so (a token with this scope, a robot account with this permission)",
        )
    return bool(allowed.allowed)


def _perf_analyzer(rows: _Rows, settings: Settings, env: Mapping[str, str]) -> None:
    from triton_release.models.latency.perf_analyzer import PerfAnalyzerMissing, find

    gated = settings.max_latency_increase is not None
    try:
        found = find(settings.perf_analyzer, env)
    except PerfAnalyzerMissing as exc:
        if settings.perf_analyzer:
            rows.add("perf_analyzer", PROBLEM, _message(exc))
        else:
            needs = "the latency gate installs it on first use" if gated else "only a latency bound needs it"
            rows.add("perf_analyzer", OK, f"not installed: {needs}")
        return
    rows.add("perf_analyzer", OK, f"{found.version} at {found.path}")
