"""Integration fixtures on the real stack (the stack fixture itself is in tests/conftest.py)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from support.reports import read_report
from support.stack import BASE_IMAGE, REGISTRY, ROOT, repo_image  # noqa: F401 - repo_image: the fixture `image`
from triton_release.action.main import main as action_main
from triton_release.cli.main import main
from triton_release.image.build import build_image
from triton_release.models.repository import Repository
from triton_release.registry.client import RegistryRepository


@pytest.fixture(scope="session")
def example_image(docker_client, unique):
    """The bundled example repository built once on the bookworm stand-in."""
    tag = f"triton-release-test/example:{unique}"
    result = build_image(Repository.load(ROOT / "model_repository"), BASE_IMAGE, tag, client=docker_client)
    yield result
    docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="session")
def tool_image(docker_client):
    """The action's image (the repository's Dockerfile), as a GitHub runner or act builds it."""
    tag = "triton-release-test/tool:latest"  # kept: the next run reuses its dependency layer
    docker_client.images.build(path=str(ROOT), tag=tag, rm=True, forcerm=True, pull=False)
    return tag


class Releaser:
    """`triton-release release` of the git repository a test filled and committed, into a registry
    repository of its own: `releaser()` returns the report, checking the exit code."""

    def __init__(self, target: str, reports: Path) -> None:
        self.target = target
        self.registry = RegistryRepository.parse(target)
        self.reports = reports

    def __call__(self, *flags: str, code: int = 0) -> dict:
        report = self.reports / "report.json"
        exit_code = main(["release", "--to", self.target, "--base-image", BASE_IMAGE, "--report", str(report), *flags])
        found = read_report(report)
        assert exit_code == code, found.get("error")
        return found

    def action(self, workspace: Path, env: dict[str, str] | None = None) -> tuple[dict, str]:
        """The action run on a push in `workspace`, releasing into this repository, with `env` (more
        inputs, PATH) over its own: its report and step summary, checking that it exits 0."""
        summary, report = self.reports / "summary.md", self.reports / "action-report.json"
        env = {
            **os.environ,
            "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_NAME": "push",
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_OUTPUT": str(self.reports / "outputs"),
            "INPUT_REPOSITORY": self.target,
            "INPUT_BASE-IMAGE": BASE_IMAGE,
            "INPUT_PUSH": "true",
            "INPUT_REPORT": str(report),
            **(env or {}),
        }
        assert action_main(env) == 0, read_report(report).get("error")
        return read_report(report), summary.read_text()


@pytest.fixture
def releaser(git_repo, tmp_path, monkeypatch, docker_client):
    monkeypatch.chdir(git_repo.root)
    release = Releaser(f"{REGISTRY}/triton-release-test/release-{uuid.uuid4().hex[:12]}", tmp_path)
    yield release
    docker_client.images.remove(f"{release.target}:candidate", force=True)


@pytest.fixture
def cli_report(tmp_path):
    """`run(*argv, code=0)`: the CLI in this process with a report, checked for its exit code; the report."""

    def run(*argv: str, code: int = 0) -> dict:
        report = tmp_path / "cli-report.json"
        report.unlink(missing_ok=True)
        exit_code = main([*argv, "--report", str(report)])
        found = read_report(report)
        assert exit_code == code, found.get("error")
        return found

    return run
