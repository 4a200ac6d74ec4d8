"""New weights (#50 item 1): a release of a model whose weights file changed goes through on the
real stack with the weights hashed once a run and staged by their blob ids, and the guards on that
path still hold: the image serves the new version, the release commit holds exactly the tree the
image was built from, and a write into the bumped folder during the release is refused before the
commit."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import threading

import docker
import pytest

from support.registries import RegistryProxy
from support.tool import release_command
from triton_release.contract import RELEASED_VERSIONS_LABEL
from triton_release.history.releases import versions_in

pytestmark = pytest.mark.integration

WEIGHTS = 4 * 1024 * 1024  # a few MiB of incompressible weights: above core.bigFileThreshold=1m


def new_weights(ws) -> tuple[str, str]:
    """Model a's version 1 gets new random weights, committed: (the commit, the next version)."""
    with open(ws.models / "a" / "1" / "weights.bin", "wb") as handle:
        handle.write(os.urandom(WEIGHTS))
    head = ws.commit("a: new weights")
    newest = versions_in(ws.registry.tags())[-1]
    return head, f"{newest.major}.{newest.minor + 1}.0"


def image_folder(client, image: str, folder: str) -> dict[str, bytes]:
    """Each file under /models/`folder` in `image` (pulled, then its local tag removed) -> its bytes."""
    repository, tag = image.rsplit(":", 1)
    client.images.pull(repository, tag=tag)
    try:
        container = client.containers.create(image, command=["true"], entrypoint=[])
        try:
            stream, _ = container.get_archive(f"/models/{folder}")
            data = io.BytesIO(b"".join(stream))
        finally:
            container.remove(force=True)
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound, docker.errors.APIError):
            client.images.remove(image)
    top = folder.rsplit("/", 1)[-1]
    with tarfile.open(fileobj=data) as tar:
        return {
            member.name.removeprefix(f"{top}/"): tar.extractfile(member).read() for member in tar if member.isfile()
        }


def test_new_weights_are_released_served_and_committed_as_the_image_holds_them(ws):
    head, version = new_weights(ws)
    done = ws.release("--commit")
    assert done.code == 0, done.out[-3000:]
    assert done.report["version"] == version
    assert done.report["steps"]["commit"]["committed"] is True
    labels = ws.registry.image_config(version)["config"]["Labels"]
    record = json.loads(labels[RELEASED_VERSIONS_LABEL])
    assert ws.git_repo.git("rev-parse", "HEAD:model_repository/a/2") == record["a"]["2"]
    assert record["a"]["2"] == ws.git_repo.git("rev-parse", f"{head}:model_repository/a/1")
    served = image_folder(ws.docker, f"{ws.image}:{version}", "a/2")
    committed = ws.git_repo.git("ls-tree", "-r", "--name-only", "HEAD:model_repository/a/2").split("\n")
    assert sorted(served) == sorted(committed)
    for name in committed:
        blob = subprocess.run(
            ["git", "cat-file", "blob", f"HEAD:model_repository/a/2/{name}"], cwd=ws.root, capture_output=True
        ).stdout
        assert served[name] == blob, name
    assert len(served["weights.bin"]) == WEIGHTS
    assert ws.git_repo.git("status", "--porcelain") == ""
    assert all(line.startswith("H ") for line in ws.git_repo.git("ls-files", "-v").split("\n"))  # no flag left


def test_a_write_into_the_new_weights_during_the_release_is_refused_before_the_commit(ws):
    """A training job working in version folder N rewrites a few bytes of the weights in place (the
    same size) while the release moves the channel: the bump moved N to N+1, so the write lands in
    N+1's weights, after the check before the push. The release commit refuses it; no commit, no tag."""
    head, version = new_weights(ws)
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "sys.stdin.readline()\n"
            "with open('weights.bin', 'r+b') as handle:\n"
            "    handle.write(b'trained on')\n"
            "print('written', flush=True)\n",
        ],
        cwd=ws.models / "a" / "1",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    saved = threading.Event()

    def write_then_forward(proxy, path, forward):
        if not saved.is_set():
            writer.stdin.write("write\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "written"
            saved.set()
        return forward()

    local_tags: list[str] = []
    try:
        with RegistryProxy("latest", write_then_forward) as proxy:
            target = f"{proxy.address}/{ws.registry.name}"
            local_tags += [f"{target}:candidate", f"{target}:{version}"]
            command = release_command(target, "--commit", "--load-timeout", "30")
            refused = subprocess.run(command, cwd=ws.root, capture_output=True, text=True, timeout=600)
    finally:
        writer.kill()
        writer.wait()
        for tag in local_tags:
            with contextlib.suppress(docker.errors.ImageNotFound):
                ws.docker.images.remove(tag)
    out = refused.stdout + refused.stderr
    assert saved.is_set(), out[-3000:]
    assert refused.returncode == 1, out[-3000:]
    message = " ".join(out.split())
    named = re.search(r"model_repository/a/(\d+)/weights\.bin \(changed\)", message)  # N+1, past any carried
    assert named is not None, out[-3000:]
    assert f"No release commit and no git tag v{version} were made" in message
    assert "Traceback" not in out
    assert ws.git_repo.git("rev-parse", "HEAD") == head
    assert ws.git_repo.git("tag", "--list", f"v{version}") == ""
    assert ws.git_repo.git("diff", "--cached", "--name-only") == ""
    assert (ws.models / "a" / named[1] / "weights.bin").read_bytes().startswith(b"trained on")
