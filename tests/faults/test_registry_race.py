"""Two releases racing for the same X.Y.Z from two machines. A registry has no conditional PUT,
so both manifest PUTs succeed and the last one wins; `push` reads X.Y.Z back after the daemon's
push and refuses unless it is the manifest this push wrote. A loopback proxy in front of the real
registry (127.0.0.1:5000) holds the X.Y.Z manifest PUTs so that the race is lost every time."""

from __future__ import annotations

import http.client
import io
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import docker
import pytest

from triton_release.registry.client import RegistryRepository
from triton_release.registry.publish import LostRace, PushResult, push, tag_release

from support.stack import REGISTRY

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class RegistryProxy:
    """A loopback HTTP proxy to the real registry. `on_manifest_put(proxy, path, forward)` runs for
    every manifest PUT of tag `tag` instead of the plain forward: it calls `forward()` (which sends
    the PUT on and returns the registry's answer) when and as it likes."""

    def __init__(self, tag: str, on_manifest_put) -> None:
        self.tag, self.on_manifest_put = tag, on_manifest_put
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Forward)
        self.server.daemon_threads = True
        self.server.proxy = self
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "RegistryProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def send(method: str, path: str, headers: dict, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request to the real registry; the Host header stays the proxy's, so that the upload
    locations it answers point back through the proxy."""
    connection = http.client.HTTPConnection(REGISTRY, timeout=120)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for key, value in headers.items():
            connection.putheader(key, value)
        if body or method in ("PUT", "POST", "PATCH"):
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        return answer.status, answer.getheaders(), answer.read()
    finally:
        connection.close()


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        proxy: RegistryProxy = self.server.proxy
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"content-length"}}

        def forward():
            return send(self.command, self.path, headers, body)

        if self.command == "PUT" and self.path.split("?")[0].endswith(f"/manifests/{proxy.tag}"):
            status, answer_headers, answer_body = proxy.on_manifest_put(proxy, self.path, forward)
        else:
            status, answer_headers, answer_body = forward()
        self.send_response(status)
        for key, value in answer_headers:
            if key.lower() not in HOP_BY_HOP | {"content-length"}:
                self.send_header(key, value)
        length = dict((k.lower(), v) for k, v in answer_headers).get("content-length", "0")
        self.send_header("Content-Length", length if self.command == "HEAD" else str(len(answer_body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer_body)

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward


@pytest.fixture
def two_images(docker_client, unique, image_tags):
    """Two small images, each one file on scratch: the two machines' builds of the same release."""
    tags = []
    for side in ("ours", "theirs"):
        tag = f"triton-release-test/race:{unique}-{side}"
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            for name, data in (("Dockerfile", f"FROM scratch\nCOPY side /side\nLABEL side={side}-{unique}\n"),
                               ("side", f"{side} {unique}\n")):
                info = tarfile.TarInfo(name)
                info.size = len(data.encode())
                tar.addfile(info, io.BytesIO(data.encode()))
        context.seek(0)
        docker_client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, pull=False)
        image_tags.append(tag)
        tags.append(tag)
    return tags


def test_two_releases_racing_for_one_version_make_one_winner(docker_client, two_images, unique, image_tags):
    """Both machines' pushes reach the manifest PUT of 1.1.0 before either is answered (a slow PUT):
    both PUTs succeed, one of them last. Only that one's release may go on to move tags."""
    arrived, written = threading.Barrier(2, timeout=120), threading.Barrier(2, timeout=120)

    def slow_put(proxy, path, forward):
        arrived.wait()    # both pushes are at their manifest PUT
        answer = forward()
        written.wait()    # both PUTs are in the registry before either push hears back
        return answer

    name = f"triton-release-faults/race-{unique}"
    outcomes: dict[str, object] = {}

    def release(image: str, proxy: RegistryProxy) -> None:  # one machine: its own daemon connection and client
        client = docker.from_env(timeout=600)
        repo = RegistryRepository.parse(f"{proxy.address}/{name}")
        try:
            outcomes[image] = push(client, image, repo, "1.1.0")
            tag_release(repo, "1.1.0", None, "latest")  # what `release` does once push returns
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcomes[image] = exc
        finally:
            client.close()

    # one proxy per machine: on one daemon, the two local `HOST/NAME:1.1.0` tags must differ
    with RegistryProxy("1.1.0", slow_put) as first, RegistryProxy("1.1.0", slow_put) as second:
        image_tags += [f"{first.address}/{name}:1.1.0", f"{second.address}/{name}:1.1.0"]
        machines = [threading.Thread(target=release, args=pair) for pair in zip(two_images, (first, second))]
        for machine in machines:
            machine.start()
        for machine in machines:
            machine.join(300)
    assert not any(m.is_alive() for m in machines)

    won = [o for o in outcomes.values() if isinstance(o, PushResult)]
    lost = [o for o in outcomes.values() if isinstance(o, LostRace)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    registry = RegistryRepository.parse(f"{REGISTRY}/{name}")
    assert registry.digest("1.1.0") == won[0].digest
    assert f"is {won[0].digest}, not sha256:" in str(lost[0]) and "another release won the race" in str(lost[0])
    assert lost[0].exit_code == 1 and lost[0].already_released  # the loser's bump is undone by `release`
    assert registry.tags() == ["1", "1.1", "1.1.0", "latest"]
    assert {registry.digest(t) for t in ("1", "1.1", "latest")} == {won[0].digest}  # the loser moved nothing


def test_a_rival_write_between_our_put_and_our_read_back_is_refused(docker_client, two_images, unique, image_tags):
    """Ours lands, then another machine's PUT of the same version, then our read-back."""
    name = f"triton-release-faults/swap-{unique}"
    direct = RegistryRepository.parse(f"{REGISTRY}/{name}")
    rival_image = docker_client.images.get(two_images[1])
    rival_image.tag(f"{REGISTRY}/{name}", "rival")
    image_tags.append(f"{REGISTRY}/{name}:rival")
    for _ in docker_client.api.push(f"{REGISTRY}/{name}", tag="rival", stream=True, decode=True):
        pass
    rival = direct.manifest("rival")

    def then_theirs(proxy, path, forward):
        answer = forward()
        direct.put_manifest("1.0.0", rival)  # the other machine's write lands just after ours
        return answer

    with RegistryProxy("1.0.0", then_theirs) as proxy:
        repo = RegistryRepository.parse(f"{proxy.address}/{name}")
        image_tags.append(f"{proxy.address}/{name}:1.0.0")
        with pytest.raises(LostRace, match=rf"is {rival.digest}, not sha256:[0-9a-f]{{64}} that this release pushed: "
                                           r"another release won the race for 1.0.0, and no other tag was moved"):
            push(docker_client, two_images[0], repo, "1.0.0")
    assert direct.digest("1.0.0") == rival.digest and direct.tags() == ["1.0.0", "rival"]
