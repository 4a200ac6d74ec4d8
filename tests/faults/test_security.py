"""Secrets and exposure: the registry password appears nowhere a person or process can read it,
and servers listen on loopback only. (Nothing runs through a shell: tests/unit/test_no_shell.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from support.models import python_model_files
from support.reports import parse_report
from support.stack import BASE_IMAGE, SERVERS
from support.workspace import change_a
from triton_release.server.container import TritonServer

pytestmark = pytest.mark.integration


class Watcher(threading.Thread):
    """Samples every process's arguments and every server container's config while a release runs."""

    def __init__(self, docker_client) -> None:
        super().__init__(daemon=True)
        self.docker = docker_client
        self.seen: list[str] = []
        self.containers = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.seen.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout)
            for container in self.docker.containers.list(filters={"label": SERVERS}):
                self.containers += 1
                self.seen.append(json.dumps(container.attrs))
            self.done.wait(0.2)


def test_the_password_is_in_no_output_report_summary_argument_or_container(ws, auth_registry, tmp_path):
    host, password = auth_registry
    change_a(ws)
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    watcher = Watcher(ws.docker)
    watcher.start()
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_WORKSPACE": str(ws.root),
        "GITHUB_EVENT_NAME": "workflow_dispatch",
        "INPUT_IMAGE": f"{host}/security/models",
        "INPUT_BASE-IMAGE": BASE_IMAGE,
        "INPUT_USERNAME": "ci-bot",
        "INPUT_PASSWORD": password,
        "INPUT_REPORT": "report.json",
    }
    done = subprocess.run(
        [sys.executable, "-m", "triton_release.action"],
        cwd=ws.root,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **env},
    )
    watcher.done.set()
    watcher.join()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"::add-mask::{password}" in done.stdout  # the one place it may appear: telling Actions to hide it
    visible = done.stdout.replace(f"::add-mask::{password}", "") + done.stderr
    report = (ws.root / "report.json").read_text()
    assert parse_report(report)["released"] is True
    assert watcher.containers > 0  # the server was watched while it ran
    for where, text in {
        "output": visible,
        "report": report,
        "summary": summary.read_text(),
        "step outputs": outputs.read_text(),
        "process arguments and server containers": "\n".join(watcher.seen),
    }.items():
        assert password not in text, where


def test_server_ports_are_published_on_loopback_only(docker_client, image_tags, make_repo, unique):
    from triton_release.image.build import build_image
    from triton_release.models.repository import Repository

    tag = f"triton-release-test/loopback:{unique}"
    image_tags.append(tag)
    build_image(Repository.load(make_repo(python_model_files("m"))), BASE_IMAGE, tag, client=docker_client)
    with TritonServer(tag, {"m": 1}, load_timeout=60, client=docker_client) as server:
        bindings = server.container.attrs["HostConfig"]["PortBindings"]
    assert bindings and all(b["HostIp"] == "127.0.0.1" for ports in bindings.values() for b in ports)
