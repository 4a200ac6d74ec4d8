"""Shared fixtures."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import docker
import pytest
import requests

from support.git import GitRepo
from support.models import write_tree
from support.registries import BaseLayers, LocalRegistry
from support.reports import check_report
from support.stack import BASE_IMAGE, REGISTRY, ROOT, SERVERS
from triton_release.session import Report


@pytest.fixture(autouse=True)
def checked_reports(monkeypatch):
    """Every report made in a test's process follows report.schema.json: checked as it is made,
    before it is written, printed or read by the test (support/reports.py checks the others)."""
    to_json = Report.to_json
    monkeypatch.setattr(Report, "to_json", lambda self: check_report(to_json(self)))


@pytest.fixture
def make_repo(tmp_path):
    """make_repo({path: content}) -> a model repository folder; python_model_files() helps."""

    def make(files: dict[str, str | bytes | None]) -> Path:
        return write_tree(tmp_path / "model_repository", files)

    return make


@pytest.fixture
def git_repo(tmp_path):
    return GitRepo(tmp_path / "work")


# -- the real local stack: Docker daemon, registry, stand-in images. Never mocked, never skipped.


@pytest.fixture(scope="session")
def stack():
    """Bring the stack up (idempotent, about a second when it is already up) or fail saying how."""
    result = subprocess.run([sys.executable, str(ROOT / "stack" / "stack.py"), "up"], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(
            f"the local stack could not start; run `make stack` and read its output:\n{result.stderr}", pytrace=False
        )
    client = docker.from_env(timeout=600)
    yield client
    leftovers = client.containers.list(all=True, filters={"label": SERVERS})  # this process's own
    for container in leftovers:
        container.remove(force=True)
    assert not leftovers, f"tests left server containers behind: {[c.name for c in leftovers]}"


# -- the sweep. `make test` runs the stack's tests on two workers (pytest-xdist); the process that
# started them sweeps once, when every worker has finished, so no worker removes an image the
# other is still using.


def _sweeps(config) -> bool:
    return os.environ.get(SWEEP_VARIABLE) == "1" and not hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if _sweeps(session.config):
        client = docker.from_env(timeout=600)
        session.config.stash[_SWEEP_FROM] = (image_tags_on(client), datetime.now(UTC))


def pytest_sessionfinish(session):
    started = session.config.stash.get(_SWEEP_FROM, None)
    if started is None:
        return
    client = docker.from_env(timeout=600)
    swept = sweep_image_tags(client, *started)
    if swept:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"removed {len(swept)} image tags the tests left behind: {', '.join(swept[:12])}"
            f"{' ...' if len(swept) > 12 else ''}"
        )


_SWEEP_FROM = pytest.StashKey[tuple[set[str], datetime]]()


# The stack's own images (stack/stack.py): made before the run, kept after it.
STACK_IMAGES = ("local/", "python:", "ghcr.io/org/triton-release:")
# `make test` sets it: a whole run owns the daemon's test images and removes what its tests left.
# A single test run beside it does not, or it would remove the images the whole run is using.
SWEEP_VARIABLE = "TRITON_RELEASE_TEST_SWEEP"


def image_tags_on(client) -> set[str]:
    """Every tag on the daemon (from one listing: `images.list` inspects each image it lists, and
    one removed in between by a test's own cleanup would fail it)."""
    return {tag for image in client.api.images() for tag in image.get("RepoTags") or () if tag != "<none>:<none>"}


def sweep_image_tags(client, before: set[str], started: datetime) -> list[str]:
    """Remove every image tag the run made (releases pulled or built, candidates, local tags) that
    a test did not remove itself, and return them; then the untagged images the run's builds left
    (a tag moved on to a newer build): the daemon is left as the run found it."""
    left = sorted(t for t in image_tags_on(client) - before if not t.startswith(STACK_IMAGES))
    for tag in left:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(tag, force=True)
    for image in client.api.images(filters={"dangling": True}):
        if datetime.fromtimestamp(image["Created"], UTC) >= started.replace(microsecond=0):
            with contextlib.suppress(docker.errors.APIError):  # still in use: left to the daemon
                client.images.remove(image["Id"])
    return left


@pytest.fixture(scope="session")
def docker_client(stack):
    return stack


@pytest.fixture(scope="session")
def unique():
    return uuid.uuid4().hex[:8]


@pytest.fixture
def image_tags(docker_client):
    """Tags a test makes; removed afterwards."""
    made: list[str] = []
    yield made
    for tag in made:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="session")
def base_layers(docker_client, tmp_path_factory):
    """The base image's layers in a registry's storage, for seeding private registries."""
    layers, _ = BaseLayers.pushed(docker_client, tmp_path_factory.mktemp("base-layers"))
    return layers


@pytest.fixture(scope="session")
def auth_registry(stack, tmp_path_factory):
    """docker-registry with htpasswd (basic) auth on a free loopback port: (address, password)."""
    password = "pw-" + secrets.token_hex(12)
    registry = LocalRegistry(tmp_path_factory.mktemp("auth-registry"), ("ci-bot", password))
    yield registry.address, password
    registry.stop()


# -- markers: each module of tests/integration, tests/faults and tests/e2e says `pytestmark = ...`.

STACK_MARKERS = ("integration", "e2e")


# The stack's longest modules, longest first, as a fresh-clone `make test` measured them (the sum
# of their tests' seconds, `--junitxml`): they are handed to the two workers first, so that neither
# is left running a long module alone at the end (make test-stack passes --no-loadscope-reorder,
# which keeps this order). A module not listed keeps its place after them.
LONGEST_FIRST = (
    "tests/integration/test_source_stub_served.py",
    "tests/faults/test_crash_convergence.py",
    "tests/faults/test_infrastructure_faults.py",
    "tests/integration/test_latency_fails_closed.py",
    "tests/integration/test_fresh_checkouts.py",
    "tests/integration/test_tls_token_registry.py",
    "tests/e2e/test_action_act.py",
    "tests/e2e/test_release_matrix_act.py",
    "tests/integration/test_scale.py",
    "tests/faults/test_security.py",
)


def pytest_collection_modifyitems(config, items):
    """A test that uses the stack without an `integration` or `e2e` mark would need Docker in
    `-m "not integration and not e2e"`, the fast suite: refuse to run rather than let it in.
    The longest modules go first (LONGEST_FIRST); the order within a module is kept."""
    gone = [module for module in LONGEST_FIRST if not (ROOT / module).is_file()]
    if gone:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names modules that are gone: {gone}")
    rank = {module: i for i, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
    unmarked = [
        item.nodeid
        for item in items
        if "stack" in item.fixturenames and not any(item.get_closest_marker(name) for name in STACK_MARKERS)
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use the local stack but are marked neither integration nor e2e "
            "(add `pytestmark = pytest.mark.integration` to their module):\n  " + "\n  ".join(unmarked)
        )


# -- a run that loses its stack stops at once and says why, rather than failing every later test
# slowly (each one waiting out its own readiness timeout) until CI's clock runs out.

STACK_LOGS = ("dockerd.log", "registry.log")


def stack_down_reason() -> str | None:
    client = None
    try:
        client = docker.from_env(timeout=30)
        client.ping()
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        return f"the base image {BASE_IMAGE}, which every later test builds on, is gone"
    except Exception as exc:  # noqa: BLE001 - any failure to answer is the finding
        return f"the Docker daemon stopped answering: {exc}"
    finally:
        if client is not None:
            client.close()
    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=30).raise_for_status()
    except requests.RequestException as exc:
        return f"the registry on {REGISTRY} stopped answering: {exc}"
    return None


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if "stack" not in item.fixturenames:
        return
    reason = stack_down_reason()
    if reason:
        tails = []
        for name in STACK_LOGS:
            log = ROOT / ".stack" / name
            if log.exists():
                tails.append(f"--- the end of {log}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:]))
        pytest.exit(f"after {item.nodeid}: {reason}\n" + "\n".join(tails), returncode=3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failure's cause printed as it happens (the end of its traceback), not only in the summary at
    the end: a run cut short by a timeout still shows why its first tests failed."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        terminal = item.config.pluginmanager.get_plugin("terminalreporter")
        tail = "\n".join(report.longreprtext.splitlines()[-25:])
        terminal.write_line(f"\n--- {report.nodeid} ({report.when}) failed:\n{tail}\n---")
