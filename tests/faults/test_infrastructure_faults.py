"""Infrastructure that is missing, refusing or failing mid-way: exit 3 (or 1 for a refusal on the
merits, such as wrong credentials), one message saying what to do, nothing half-done."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from support.registries import FakeRegistry, LocalRegistry
from support.reports import read_report
from support.stack import BASE_IMAGE
from support.throttle import ThrottlingProxy
from support.tool import release_command, start
from support.workspace import Workspace, assert_refused_cleanly, change_a
from triton_release.contract import is_ledger_tag
from triton_release.registry.client import RegistryRepository
from triton_release.registry.ledger import read_ledger

pytestmark = pytest.mark.integration


def test_no_docker_daemon(ws):
    change_a(ws)
    before = ws.state()
    outcome = ws.release(env={"DOCKER_HOST": "unix:///tmp/no-docker-here.sock"})
    assert_refused_cleanly(ws, before, outcome, 3, "No Docker daemon answers", "make stack")


def test_registry_down_before_anything_is_built(ws):
    change_a(ws)
    before = ws.state()
    outcome = ws.run("release", "--to", "127.0.0.1:9/team/models", "--base-image", BASE_IMAGE)
    assert_refused_cleanly(ws, before, outcome, 3, "The registry 127.0.0.1:9 is unreachable")
    assert "build" not in outcome.report["steps"]


@pytest.mark.parametrize(
    ("status", "code", "fragment"),
    [
        (401, 1, "refused to list the tags of"),
        (403, 1, "HTTP 403"),
        (429, 3, "is overloaded"),
        (500, 3, "failed when asked to list the tags"),
    ],
)
def test_registry_answering_an_error(ws, status, code, fragment):
    change_a(ws)
    before = ws.state()
    start = time.monotonic()
    with FakeRegistry(status=status) as registry:
        outcome = ws.run("release", "--to", f"{registry.address}/team/models", "--base-image", BASE_IMAGE)
    assert_refused_cleanly(ws, before, outcome, code, fragment, f"HTTP {status}")
    assert time.monotonic() - start < 60  # retries are bounded


def test_wrong_credentials_are_refused_without_showing_them(ws, auth_registry):
    host, password = auth_registry
    change_a(ws)
    before = ws.state()
    wrong = "not-" + password
    outcome = ws.run(
        "release",
        "--to",
        f"{host}/team/models",
        "--base-image",
        BASE_IMAGE,
        env={"TRITON_RELEASE_USERNAME": "ci-bot", "TRITON_RELEASE_PASSWORD": wrong},
    )
    assert_refused_cleanly(ws, before, outcome, 1, "as ci-bot (TRITON_RELEASE_USERNAME/_PASSWORD)")
    assert wrong not in outcome.out and wrong not in json.dumps(outcome.report)


def test_a_base_image_that_does_not_exist(ws):
    change_a(ws)
    before = ws.state()
    outcome = ws.run("release", "--to", ws.image, "--base-image", "local/no-such-tritonserver:1.0")
    assert_refused_cleanly(
        ws, before, outcome, 1, "local/no-such-tritonserver:1.0 is neither on this Docker host", "--base-image"
    )


def test_disk_full_while_writing_the_build_context(ws, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(small)], check=True)
    try:
        ws.write({"a/1/weights.bin": os.urandom(64 * 1024)})
        ws.commit("a: weights larger than the temporary disk")
        before = ws.state()
        outcome = ws.release(env={"TMPDIR": str(small)})
        assert_refused_cleanly(ws, before, outcome, 3, f"No space left in {small}", "TMPDIR")
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_registry_stopped_mid_push_then_a_rerun_completes(ws, tmp_path, base_layers):
    """A first release to a registry of the test's own (the base's layers already there), with 6 MiB
    of weights going up through a slow link: stop the registry while they upload. No tag may point
    at a partial image; the rerun pushes it whole."""
    registry = LocalRegistry(tmp_path / "registry", base=base_layers)
    host, port = registry.address.split(":")
    proxy = ThrottlingProxy((host, int(port)), 2 << 20)  # 2 MiB/s towards the registry
    target = f"{registry.address}/team/models"
    try:
        ws.write({"a/1/weights.bin": os.urandom(6 << 20)})  # about 3 s through the slow link
        ws.commit("a: weights")
        report = tmp_path / "report.json"
        process = start(release_command(f"{proxy.address}/team/models", "--report", str(report)), cwd=ws.root)
        uploads = tmp_path / "registry/data/docker/registry/v2/repositories/team/models/_uploads"
        deadline = time.monotonic() + 120
        repo = RegistryRepository.parse(target)
        while "1.0.0" not in read_ledger(repo).entries and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[0][-3000:]  # the build entered before its push
            time.sleep(0.02)
        while not (uploads.exists() and any(uploads.iterdir())) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[0][-3000:]
            time.sleep(0.02)
        registry.stop()
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 3, out[-3000:]
        assert "Run the push again" in read_report(report)["error"]["message"]
        registry.start()
        assert [t for t in repo.tags() if not is_ledger_tag(t)] == []  # no tag on a partial image (the ledger: pending)
        assert "1.0.0" not in read_ledger(repo).releases  # entered before its put, never confirmed: not issued
        assert ws.git_repo.git("status", "--porcelain") == ""
        again = ws.run("release", "--to", target, "--base-image", BASE_IMAGE)
        assert again.code == 0, again.out[-3000:]
        assert repo.digest("1.0.0") == repo.digest("latest") == again.report["digest"]
    finally:
        proxy.close()
        registry.stop()


def test_registry_killed_while_a_bumped_release_uploads_its_layer_undoes_the_bump_and_the_rerun_releases_it(
    tmp_path, docker_client, base_layers
):
    """A registry of the test's own holds 1.0.0 (on the base's layers, seeded); a change bumps a, and the
    registry process is killed while the new layer goes up, through a slow link so that the kill
    lands mid-upload. No manifest can have been sent: exit 3, and since nothing was published the
    bump is undone and the journal ended. With the registry back the rerun releases 1.1.0."""
    registry = LocalRegistry(tmp_path / "registry", base=base_layers)
    host, port = registry.address.split(":")
    proxy = ThrottlingProxy((host, int(port)), 2 << 20)  # 2 MiB/s towards the registry
    try:
        ws = Workspace(tmp_path / "work", f"{registry.address}/team/models", docker_client)  # 1.0.0
        ws.write({"a/1/weights.bin": os.urandom(12 << 20)})  # about 6 s through the slow link, past the tests
        change_a(ws)
        uploads = tmp_path / "registry/data/docker/registry/v2/repositories/team/models/_uploads"
        before = set(uploads.iterdir()) if uploads.exists() else set()
        report = tmp_path / "report.json"
        slow = f"{proxy.address}/team/models"
        process = start(release_command(slow, "--report", str(report)), cwd=ws.root)
        deadline = time.monotonic() + 300
        while not (uploads.exists() and set(uploads.iterdir()) - before) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[0][-3000:]
            time.sleep(0.02)
        registry.stop()  # killed mid-upload: the layer is not all there, no manifest was sent
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 3, out[-3000:]
        found = read_report(report)
        # killed while the layer went up beside the tests, the push finds the registry gone; killed
        # during the push, the daemon's push fails: either says what to do, and nothing is published
        message = found["error"]["message"]
        assert "Run the push again" in message or "is unreachable (" in message, message
        assert found["released"] is None and found["steps"].get("undo-bump", {}).get("ok") is True, (
            sorted(found["steps"]),
            out[-3000:],
        )
        assert found["steps"].get("push", {"ok": False})["ok"] is False
        assert ws.git_repo.git("status", "--porcelain") == ""  # the bump undone: a/2 is gone
        assert not (ws.models / "a" / "2").exists()
        assert not (ws.root / ".git" / "triton-release" / "bump.json").exists()  # nothing for a rerun to finish
        registry.start()
        assert "1.1.0" not in ws.registry.tags()
        again = ws.release()
        assert again.code == 0, again.out[-3000:]
        assert again.report["version"] == "1.1.0" and ws.registry.digest("latest") == again.report["digest"]
        assert (ws.models / "a" / "2" / "weights.bin").exists()  # the rerun's own bump, published
    finally:
        proxy.close()
        registry.stop()
        for image in docker_client.images.list():
            for tag in image.tags:
                if tag.startswith((f"{registry.address}/", f"{proxy.address}/")):
                    docker_client.images.remove(tag, force=True)


def test_two_releases_at_once_never_share_a_version(ws, tmp_path):
    change_a(ws)
    clones = []
    for name in ("one", "two"):
        clone = tmp_path / name
        subprocess.run(["git", "clone", "-q", str(ws.root), str(clone)], check=True)
        clones.append(clone)
    processes = [
        start(release_command(ws.image, "--report", str(clone.parent / f"{clone.name}.json")), cwd=clone)
        for clone in clones
    ]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    reports = [read_report(clone.parent / f"{clone.name}.json") for clone in clones]
    assert [p.returncode for p in processes] == [0, 0], outputs
    released = [r for r in reports if r.get("released")]
    assert len(released) >= 1
    versions = [r["version"] for r in released]
    assert len(set(versions)) == len(versions)  # one wins; the other waits and finds nothing new, or takes the next
    for r in released:
        assert ws.registry.digest(r["version"]) == r["digest"]  # nobody overwrote it
