"""Progress lines on the real stack: a push through a slow link (a throttling proxy in front of
the registry) shows bytes sent of the total with throughput, as plain lines in GitHub Actions."""

from __future__ import annotations

import io
import os
import re
import tarfile
import uuid

import pytest

from support.stack import REGISTRY
from support.throttle import ThrottlingProxy
from triton_release.cli.main import main
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.integration

MiB = 1 << 20
SIZE = 16 * MiB  # incompressible: what is sent is what is stored
RATE = 2 * MiB  # a second through the proxy: the push takes about 8 s, more than the 5 s between two lines
SIZE_TEXT = r"[0-9.]+ (?:B|KiB|MiB|GiB)"
PROGRESS = re.compile(
    rf"push: (?P<done>{SIZE_TEXT})(?: of (?P<total>{SIZE_TEXT}))?(?: in (?P<seconds>[0-9.]+) s)?"
    rf"(?: \((?P<rate>{SIZE_TEXT})/s\))?(?:, (?P<layers>\d+ of \d+ layers done))?"
)


@pytest.fixture
def weighty_image(docker_client, image_tags):
    """An image of one model version holding a few MiB of random bytes, on no base at all: only
    its own layer goes up (a new registry address knows none of a base image's layers)."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (
            ("Dockerfile", b"FROM scratch\nCOPY weights.bin /models/big/1/weights.bin\n"),
            ("weights.bin", os.urandom(SIZE)),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    tag = f"triton-release-test/progress:{uuid.uuid4().hex[:8]}"
    docker_client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    image_tags.append(tag)
    return tag


def test_a_slow_push_shows_plain_progress_lines_in_github_actions(weighty_image, image_tags, tmp_path, capsys):
    host, port = REGISTRY.split(":")
    name = f"triton-release-test/progress-{uuid.uuid4().hex[:8]}"
    with ThrottlingProxy((host, int(port)), RATE) as proxy:
        target = f"{proxy.address}/{name}"
        image_tags.append(f"{target}:1.0.0")
        try:
            code = main(
                [
                    "push",
                    "--image",
                    weighty_image,
                    "--to",
                    target,
                    "--version",
                    "1.0.0",
                    "--report",
                    str(tmp_path / "report.json"),
                ],
                env={**os.environ, "GITHUB_ACTIONS": "true"},
            )
        finally:
            pushed = RegistryRepository.parse(f"{REGISTRY}/{name}")
            digest = pushed.digest("1.0.0")
            if digest:
                pushed.delete(digest)
        assert proxy.sent >= SIZE  # the layer went through the slow link
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    group = lines[lines.index("::group::push") + 1 : lines.index("::endgroup::")]
    shown = [PROGRESS.fullmatch(line) for line in group if line.startswith("push: ")]
    assert all(shown), group
    assert len(shown) >= 3, group  # the first, at least one 5 s later, the last
    *during, last = shown
    assert all(m["total"] and m["layers"] and not m["seconds"] for m in during), group
    assert all(m["rate"] for m in during[1:]), group  # throughput, measured since the line before
    sent = [_bytes(m["done"]) for m in shown]
    assert sent == sorted(sent) and sent[0] < SIZE, group
    assert last["done"] == last["total"] == f"{SIZE / MiB:.1f} MiB" and last["seconds"] and last["rate"], group


def _bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
