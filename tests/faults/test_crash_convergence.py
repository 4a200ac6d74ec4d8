"""A runner that dies (SIGKILL: no cleanup code runs) at any step of a real release, and the rerun
in the same workspace, as a self-hosted runner makes it: it converges. One release of the change,
the earlier release unchanged, the bump committed and tagged once, the tree clean, no container
left. A signal at a random moment stops the run within seconds with its cleanup done."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
import uuid

import pytest

from support.models import PYTHON_MODEL
from support.registries import LocalRegistry, RegistryProxy
from support.stack import REGISTRY, SERVERS
from support.tool import release_command, start
from support.workspace import Workspace
from triton_release.contract import OWNER_LABEL
from triton_release.history.releases import versions_in
from triton_release.processes import alive
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.integration


def command(ws: Workspace) -> list[str]:
    """The release every run here makes, with --commit as a self-hosted runner makes it."""
    return release_command(ws.image, "--load-timeout", "60", "--commit")


def outside_ci() -> dict[str, str]:
    """This process's environment with CI emptied."""
    return {**os.environ, "CI": ""}


def run_release(ws: Workspace) -> subprocess.CompletedProcess:
    """A release in `ws` run to its end, its output captured."""
    return subprocess.run(command(ws), cwd=ws.root, capture_output=True, text=True, env=outside_ci(), timeout=600)


def run_until(ws: Workspace, trigger, *, sig: int = signal.SIGKILL, delay: float = 0.0) -> tuple[int, str, bool]:
    """Run a release and send `sig` `delay` seconds after the first line `trigger` accepts. Returns
    the exit code, the output, and whether the signal was sent."""
    process = start(command(ws), cwd=ws.root, env=outside_ci())
    lines, sent, at = [], threading.Event(), []

    def fire():
        time.sleep(delay)
        if process.poll() is None:
            at.append(time.monotonic())
            process.send_signal(sig)
            sent.set()

    for line in process.stdout:
        lines.append(line)
        if not sent.is_set() and trigger(line):
            threading.Thread(target=fire, daemon=True).start()
            trigger = lambda _line: False  # noqa: E731 - once
    code = process.wait(timeout=300)
    if at:  # a signal stops the run within seconds, cleanup included (generous on a loaded runner)
        assert time.monotonic() - at[0] < 30, "".join(lines)[-2000:]
    return code, "".join(lines), sent.is_set()


@pytest.fixture
def fresh(docker_client, tmp_path, released_once):
    """A workspace of its own with 1.0.0 released into a registry repository of its own: a copy of
    `released_once`'s checkout and releases, as that release would have left them here."""
    image = f"{REGISTRY}/triton-release-faults/crash-{uuid.uuid4().hex[:10]}"
    ws = Workspace(tmp_path / "work", image, docker_client, branched_from=released_once)
    yield ws
    for tag in ("candidate",):
        with contextlib.suppress(Exception):
            docker_client.images.remove(f"{ws.image}:{tag}", force=True)


def change_a(ws: Workspace) -> None:
    ws.write({"a/1/model.py": "# a change\n" + PYTHON_MODEL})
    ws.commit("a: a change")


def assert_converged(ws: Workspace, first_digest: str) -> None:
    rerun = run_release(ws)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert [str(v) for v in versions_in(ws.registry.tags())] == ["1.0.0", "1.1.0"]
    assert ws.registry.digest("1.0.0") == first_digest
    assert ws.git_repo.git("log", "-1", "--format=%s") == "release 1.1.0"
    assert ws.git_repo.git("tag", "--points-at", "HEAD") == "v1.1.0"
    assert ws.git_repo.git("tag", "--list", "v*") == "v1.1.0"
    assert ws.git_repo.git("status", "--porcelain", "--ignored") == ""
    assert (ws.models / "a" / "1" / "model.py").read_text() == PYTHON_MODEL
    assert (ws.models / "a" / "2" / "model.py").read_text().startswith("# a change")
    assert not ws.docker.containers.list(all=True, filters={"label": SERVERS})
    assert not orphans(ws)
    assert not (ws.root / ".git" / "triton-release" / "bump.json").exists()


def orphans(ws: Workspace) -> list[str]:
    """Containers (servers, probes) whose owning run is gone: a killed run's, never removed."""
    found = ws.docker.api.containers(all=True, filters={"label": OWNER_LABEL})  # never inspected: one may go
    return [c["Names"][0] for c in found if not alive(json.loads(c["Labels"][OWNER_LABEL]), elsewhere=True)]


STEPS = ["bump", "export", "environments", "build", "test", "push", "tags"]


@pytest.mark.parametrize("after", STEPS)
def test_a_kill_after_any_step_converges_on_the_rerun(fresh, after):
    first = fresh.registry.digest("1.0.0")
    change_a(fresh)
    code, out, sent = run_until(fresh, lambda line: line.startswith(f"{after}: done"))
    assert sent and code == -signal.SIGKILL, out[-2000:]
    assert_converged(fresh, first)


@pytest.mark.parametrize(("during", "delay"), [("test", 0.3), ("build", 0.05), ("commit", 0.0)])
def test_a_kill_inside_a_step_converges_on_the_rerun(fresh, during, delay):
    first = fresh.registry.digest("1.0.0")
    change_a(fresh)
    previous = {"test": "build", "build": "environments", "commit": "tags"}[during]
    code, out, sent = run_until(fresh, lambda line: line.startswith(f"{previous}: done"), delay=delay)
    assert sent, out[-2000:]
    if during == "commit":  # git itself killed, holding its index.lock: the state a kill in git leaves
        (fresh.root / ".git" / "index.lock").write_text("")
    assert_converged(fresh, first)


def test_a_signal_at_random_moments_always_stops_within_seconds_and_cleans_up(fresh):
    """16 SIGTERMs at random points of real releases, one in each sixteenth of its first 3 seconds (a
    release of the change, from its first line, takes about that long): each run exits 143 (or had
    finished), within seconds, with the tree as it was and no container; never a traceback, never a
    lost signal. A signal after X.Y.Z went up keeps the bump (the release is out): the rerun
    finishes it forward."""
    change_a(fresh)
    rng = random.Random(25)
    trials = 16
    for trial in range(trials):
        delay = 3.0 * (trial + rng.random()) / trials
        code, out, sent = run_until(fresh, lambda _line: True, sig=signal.SIGTERM, delay=delay)
        assert "Traceback" not in out and "Exception ignored" not in out, out[-3000:]
        assert not fresh.docker.containers.list(all=True, filters={"label": SERVERS}), trial
        assert not orphans(fresh), (trial, out[-2000:])
        journal = fresh.root / ".git" / "triton-release" / "bump.json"
        if journal.exists():  # published before the signal: never rolled back, finished by the rerun
            assert code == 143, (trial, code, out[-2000:])
            assert "a rerun of triton-release on this commit finishes it" in out, (trial, out[-2000:])
            rerun = run_release(fresh)
            assert rerun.returncode == 0, (trial, rerun.stdout[-2000:] + rerun.stderr[-2000:])
            assert not journal.exists(), (trial, rerun.stdout[-2000:])
            assert fresh.git_repo.git("status", "--porcelain") == "", (trial, rerun.stdout[-2000:])
            change_newest(fresh, trial)
            continue
        assert fresh.git_repo.git("status", "--porcelain") == "", (trial, out[-2000:])
        if code == 143 and "interrupted by SIGTERM" in out and "stopped and cleaned up" in out:
            continue  # before anything went up, or after the release was whole (its journal ended)
        if code == 143:  # the signal held until the work was over: released, and said so
            assert "interrupted by SIGTERM as the run ended: its work was done" in out, out[-2000:]
        else:
            assert code in (0, -signal.SIGTERM), (trial, code, out[-2000:])  # done before, or as it exited
        change_newest(fresh, trial)


def change_newest(ws: Workspace, trial: int) -> None:
    """Released: the next trial's change, committed in a's newest version folder (the release moved
    the last change there; an older, released one is never edited)."""
    newest = max(int(folder.name) for folder in (ws.models / "a").iterdir() if folder.name.isdigit())
    ws.write({f"a/{newest}/model.py": f"# change {trial}\n" + PYTHON_MODEL})
    ws.commit(f"a: change {trial}")


def test_the_registry_killed_as_the_bumped_release_puts_its_manifest_then_the_rerun_converges(
    docker_client, tmp_path, base_layers
):
    """The registry process dies (SIGKILL) as the second release, bumped, puts its manifest (its layers
    are up; whether the manifest is, the run cannot tell): exit 3, nothing tagged, the bump kept in its
    journal; with the registry back, the rerun in the same workspace releases 1.1.0 once, with
    version 1 as 1.0.0 shipped it."""
    registry = LocalRegistry(tmp_path / "registry", base=base_layers)
    killed = threading.Event()

    def kill_registry(proxy, path, forward):
        if armed.is_set() and not killed.is_set():
            killed.set()
            registry.stop()
        return forward()

    armed = threading.Event()
    with RegistryProxy("1.1.0", kill_registry, upstream=registry.address) as proxy:
        try:  # 1.0.0 straight to the registry (on the seeded base's layers); the second release through the proxy
            ws = Workspace(tmp_path / "work", f"{registry.address}/team/models", docker_client)
            ws.image = f"{proxy.address}/team/models"
            ws.registry = RegistryRepository.parse(ws.image)
            first = ws.registry.digest("1.0.0")
            change_a(ws)
            armed.set()
            failed = run_release(ws)
            out = failed.stdout + failed.stderr
            assert killed.is_set(), out[-3000:]
            assert failed.returncode == 3, out[-3000:]
            assert "Traceback" not in out, out[-3000:]
            assert (ws.root / ".git" / "triton-release" / "bump.json").exists()  # the bump kept for the rerun
            assert ws.git_repo.git("log", "-1", "--format=%s") == "a: a change"
            registry.start()
            assert [str(v) for v in versions_in(ws.registry.tags())] == ["1.0.0"]
            assert_converged(ws, first)
        finally:
            registry.stop()
            for name in (registry.address, proxy.address):
                for found in docker_client.images.list(name=f"{name}/team/models"):
                    docker_client.images.remove(found.id, force=True)
