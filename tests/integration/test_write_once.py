"""Releases into a write-once repository: the stack's registry behind a proxy that refuses every
manifest PUT onto an existing tag exactly as ECR answers in an IMMUTABLE repository (HTTP 400,
TAG_INVALID). With `tags: version` a first release and a change both go out, the ledger (one new
tag per entry) included; the default, which moves X.Y, X and the channel, is refused by name at
the first tag it would overwrite, with what docs/tags.md says it leaves behind."""

from __future__ import annotations

import contextlib
import subprocess

import docker
import pytest

from support.git import GitRepo
from support.models import python_model_files
from support.registries import RegistryProxy
from support.reports import read_report
from support.stack import BASE_IMAGE, REGISTRY
from support.tool import release_command
from triton_release import contract
from triton_release.cli.main import main
from triton_release.registry.client import RegistryRepository
from triton_release.registry.ledger import read_ledger

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def write_once(tmp_path_factory, unique, docker_client):
    """A git repository with one model, and a release command into a write-once repository."""
    root = tmp_path_factory.mktemp("write-once")
    git_repo = GitRepo(root / "work")
    git_repo.write(python_model_files("a"))
    git_repo.commit("one model")
    name = f"triton-release-test/write-once-{unique}"
    # the base image's layers in the repository first, straight to the registry, where the daemon mounts
    # them from the stack's other repositories (through a proxy on a new port it would send them all)
    seed = f"{REGISTRY}/{name}"
    docker_client.images.get(BASE_IMAGE).tag(seed, "base")
    try:
        for line in docker_client.api.push(seed, "base", stream=True, decode=True):
            assert "error" not in line, line
    finally:
        docker_client.images.remove(f"{seed}:base")
    direct = RegistryRepository.parse(seed)
    direct.delete(direct.digest("base"))  # the tag goes, its layers stay in the repository
    with RegistryProxy.write_once() as proxy:
        target = f"{proxy.address}/{name}"

        def release(*extra: str) -> tuple[int, dict]:
            report = root / "report.json"
            with pytest.MonkeyPatch.context() as patch:
                patch.chdir(git_repo.root)
                code = main(
                    ["release", "--to", target, "--base-image", BASE_IMAGE, "--commit", "--report", str(report), *extra]
                )
            return code, read_report(report)

        yield git_repo, RegistryRepository.parse(f"{REGISTRY}/{name}"), release, proxy
        for image in docker_client.images.list(name=target):
            for tag in image.tags:
                if tag.startswith(f"{target}:"):
                    with contextlib.suppress(docker.errors.APIError):
                        docker_client.images.remove(tag, force=True)


def _edit(git_repo: GitRepo, note: str) -> None:
    """A change to a's newest version: the release bumps it (a minor release)."""
    newest = max(int(p.name) for p in (git_repo.models / "a").iterdir() if p.name.isdigit())
    model_py = git_repo.models / "a" / str(newest) / "model.py"
    model_py.write_text(f"# {note}\n" + model_py.read_text())
    git_repo.commit(f"a: {note}")


def _own(repo: RegistryRepository) -> list[str]:
    return [t for t in repo.tags() if not contract.is_ledger_tag(t) and not contract.is_artifact_tag(t)]


def test_tags_version_releases_and_the_default_is_refused_at_the_first_tag_it_would_move(write_once):
    git_repo, repo, release, proxy = write_once
    report_path = git_repo.root.parent / "refused.json"
    first_commit = git_repo.git("rev-parse", "HEAD")
    code, report = release("--tags", "version")
    assert code == 0, report.get("error")
    assert report["version"] == "1.0.0" and report["steps"]["tags"]["tags"] == [f"sha-{first_commit[:12]}"]
    assert _own(repo) == ["1.0.0", f"sha-{first_commit[:12]}"]  # no X.Y, X or channel

    _edit(git_repo, "a change")
    second_commit = git_repo.git("rev-parse", "HEAD")
    code, report = release("--tags", "version")
    assert code == 0, report.get("error")
    assert report["version"] == "1.1.0" and report["steps"]["push"]["pushed_by"] == "registry"
    assert _own(repo) == sorted(["1.0.0", "1.1.0", f"sha-{first_commit[:12]}", f"sha-{second_commit[:12]}"])
    assert repo.digest(contract.evidence_tag(repo.digest("1.1.0"))) is not None  # its evidence, a tag of its own
    ledger = read_ledger(repo)
    assert ledger.releases == {"1.0.0": first_commit, "1.1.0": second_commit}
    assert ledger.entries["1.1.0"].manifest == repo.digest("1.1.0")  # entered by its whole manifest
    assert proxy.refused == []  # nothing asked to overwrite a tag

    code, report = release()  # nothing changed; the default finishes the moving tags, all new here
    assert code == 0 and report["released"] is False, report.get("error")
    assert {repo.digest(t) for t in ("1.1", "1", "latest")} == {repo.digest("1.1.0")}

    _edit(git_repo, "another change")
    refused = subprocess.run(  # a process of its own: it ends, as a CI job does, and the rerun finishes it
        release_command(f"{proxy.address}/{repo.name}", "--commit", "--report", str(report_path)),
        cwd=git_repo.root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert refused.returncode == 1, refused.stderr
    report = read_report(report_path)
    message = " ".join(report["error"]["message"].split())
    assert message in " ".join(refused.stderr.split())  # the one paragraph the user sees
    assert (
        f"{proxy.address}/{repo.name} refused to overwrite the tag 1 (HTTP 400: The image tag '1' already exists"
        in message
    )
    assert "forbids overwriting tags" in message and "Set `tags: version`" in message
    assert f"1.2.0 is released as {repo.digest('1.2.0')}; the tags before 1 point at it (1.2)" in message
    assert proxy.refused == ["1"]
    # as docs/tags.md says: X.Y.Z, its evidence and its ledger entries are in, X.Y moved, the rest not
    assert repo.digest("1.2") == repo.digest("1.2.0") and repo.digest(contract.evidence_tag(repo.digest("1.2.0")))
    assert {repo.digest(t) for t in ("1", "latest")} == {repo.digest("1.1.0")}
    assert "1.2.0" in read_ledger(repo).releases
    assert git_repo.git("status", "--porcelain") != ""  # 1.2.0's bump, published, is not committed yet

    code, report = release("--tags", "version")  # the fix the message gives: the rerun finishes 1.2.0
    assert code == 0 and report["released"] is False, report.get("error")
    assert report["steps"]["finish"]["finished_tags"] == [f"sha-{git_repo.git('rev-parse', 'HEAD~1')[:12]}"]
    assert git_repo.git("log", "-1", "--format=%s") == "release 1.2.0" and git_repo.git("status", "--porcelain") == ""
    assert proxy.refused == ["1"] and repo.digest("latest") == repo.digest("1.1.0")
