"""A hostile or broken registry, token service or Docker host, on loopback fakes started by each
test: endless tag lists, answers that trickle in, HTML where JSON belongs, a token realm that
would take the credentials elsewhere, lying digest headers, and a daemon socket that never answers."""

from __future__ import annotations

import hashlib
import json
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from support.registries import FakeRegistry
from triton_release.errors import InfrastructureError, Refused
from triton_release.image.engine import docker_client
from triton_release.registry.client import Manifest, RegistryRepository
from triton_release.registry.credentials import Credentials

USER, PASSWORD = "bot", "s3cret-pw"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def open_repo(fake: FakeRegistry, credentials: Credentials | None = None) -> RegistryRepository:
    return RegistryRepository.parse(f"{fake.address}/team/models", credentials)


# -- 1. pagination -----------------------------------------------------------------------------


def test_a_tag_list_linking_to_itself_is_read_once():
    with FakeRegistry(auth=False) as fake:
        fake.link = '</v2/team/models/tags/list?n=1000>; rel="next"'
        assert open_repo(fake).tags() == ["1.0.0", "latest"]
        assert fake.requests == [("GET", "/v2/team/models/tags/list?n=1000")]


def test_a_tag_list_that_never_ends_is_given_up_after_the_page_cap():
    def next_page(handler) -> bool:
        if "tags/list" not in handler.path:
            return False
        page = len(handler.server.fake.requests)
        link = f'</v2/team/models/tags/list?n=1000&last=t{page}>; rel="next"'
        handler._send(200, {"name": "team/models", "tags": [f"t{page}"]}, {"Link": link})
        return True

    with FakeRegistry(auth=False, hook=next_page) as fake:
        repo = open_repo(fake)
        repo.max_pages = 5
        with pytest.raises(InfrastructureError, match=r"kept linking to more pages .* after 5 pages"):
            repo.tags()
        assert len(fake.requests) == 5


# -- 2. a deadline for the whole answer --------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("slow_part", ["headers", "body"])
def test_an_answer_trickling_in_is_given_up_at_the_deadline(slow_part):
    body = json.dumps({"name": "team/models", "tags": ["1.0.0"]}).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()

    def trickle(handler) -> bool:  # one byte every 0.2 s: each read is quick, the answer never ends
        fast, slow = (b"", head + body) if slow_part == "headers" else (head, body)
        try:
            handler.wfile.write(fast)
            for byte in slow:
                if handler.server.fake.stopping.wait(0.2):
                    break
                handler.wfile.write(bytes([byte]))
        except OSError:  # the client cut the connection
            pass
        handler.close_connection = True
        return True

    with FakeRegistry(auth=False, hook=trickle) as fake:
        repo = open_repo(fake)
        repo.deadline = 1.0
        start = time.monotonic()
        with pytest.raises(
            InfrastructureError,
            match=rf"The registry {fake.address} did not finish its answer "
            r"within 1 s",
        ) as error:
            repo.tags()
        assert time.monotonic() - start < 5
        assert error.value.exit_code == 3
        assert len(fake.requests) == 1  # a deadline is not retried


# -- 3. not JSON where JSON is expected --------------------------------------------------------

HTML = b"<html><body><h1>Sign in</h1></body></html>"


@pytest.mark.parametrize("where", ["tag list", "token", "manifest"])
def test_html_where_json_is_expected_is_an_infrastructure_error(where):
    def login_page(handler) -> bool:
        if (where == "token") == handler.path.startswith("/token"):
            handler._send(200, HTML, {"Content-Type": "text/html"})
            return True
        return False

    with FakeRegistry(auth=where == "token", hook=login_page) as fake:
        repo = open_repo(fake, Credentials(USER, PASSWORD))
        with pytest.raises(InfrastructureError) as error:
            repo.manifest("1.0.0") if where == "manifest" else repo.tags()
        message = str(error.value)
        expected = {"tag list": "the tag list of", "token": "a token (JSON)", "manifest": "the manifest of"}[where]
        assert expected in message and "text/html" in message and fake.address in message
        assert error.value.exit_code == 3 and PASSWORD not in message


# -- 4. where credentials may go ---------------------------------------------------------------


def test_credentials_never_go_to_a_plain_http_realm_on_another_host():
    with (
        FakeRegistry(user=USER, password=PASSWORD) as elsewhere,
        FakeRegistry(user=USER, password=PASSWORD, realm=f"http://{elsewhere.address}/token") as fake,
    ):
        with pytest.raises(Refused) as refused:
            open_repo(fake, Credentials(USER, PASSWORD, "inputs")).tags()
        message = str(refused.value)
        assert f"http://{elsewhere.address}/token" in message and "were not sent" in message
        assert PASSWORD not in message and refused.value.exit_code == 1
        assert elsewhere.requests == [] and fake.token_requests == []


def test_an_https_realm_on_another_host_is_asked_and_an_anonymous_one_anywhere():
    with socket.socket() as closed:  # a port where nothing listens: the realm is tried, then unreachable
        closed.bind(("127.0.0.1", 0))
        realm = f"https://127.0.0.1:{closed.getsockname()[1]}/token"
    with (
        FakeRegistry(realm=realm) as fake,
        pytest.raises(InfrastructureError, match=r"token service https://127.0.0.1:\d+/token is unreachable"),
    ):
        open_repo(fake, Credentials(USER, PASSWORD)).tags()
    with (
        FakeRegistry(user=USER, password=PASSWORD) as elsewhere,
        FakeRegistry(realm=f"http://{elsewhere.address}/token") as fake,
    ):
        with pytest.raises(Refused, match="anonymously"):  # no credentials to leak: asked, and refused there
            open_repo(fake).tags()
        assert len(elsewhere.token_requests) == 1 and "Authorization" not in str(elsewhere.requests)


# -- 5. digests are the manifest bytes' ---------------------------------------------------------


def test_digests_are_computed_from_the_manifest_bytes_not_the_header():
    body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "layers": []}).encode()
    real = "sha256:" + hashlib.sha256(body).hexdigest()
    with FakeRegistry(auth=False) as fake:
        fake.manifests["1.0.0"] = (MANIFEST_TYPE, body)
        fake.digest_header = "sha256:" + "0" * 64  # what a broken registry or proxy claims
        repo = open_repo(fake)
        assert repo.digest("1.0.0") == real
        assert repo.manifest("1.0.0").digest == real
        assert repo.put_manifest("latest", Manifest(MANIFEST_TYPE, body, "sha256:" + "1" * 64)) == real
        assert repo.digest("latest") == real and repo.digest("2.0.0") is None


# -- 7. a Docker host that accepts and never answers -------------------------------------------


@pytest.mark.timeout(60)
def test_a_docker_host_that_never_answers_is_given_up_after_the_ping_timeout(tmp_path):
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as silent:
        silent.bind(str(path))
        silent.listen(8)  # the kernel accepts; nobody reads or answers
        start = time.monotonic()
        with pytest.raises(InfrastructureError) as error:
            docker_client(env={"DOCKER_HOST": f"unix://{path}"}, ping_timeout=1)
        assert time.monotonic() - start < 10
    assert f"No Docker daemon answers at DOCKER_HOST unix://{path} within 1 s" in str(error.value)
    assert error.value.exit_code == 3


class _Daemon(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.endswith("/version"):
            body = json.dumps({"ApiVersion": "1.43", "Version": "24.0.0"}).encode()
        elif self.path.endswith("/_ping"):
            body = b"OK"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self):
        return "unix"


@pytest.mark.timeout(60)
def test_a_docker_host_that_answers_keeps_the_long_timeout_for_the_work(tmp_path):
    path = tmp_path / "docker.sock"
    server = socketserver.UnixStreamServer(str(path), _Daemon)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = docker_client(600, env={"DOCKER_HOST": f"unix://{path}"}, ping_timeout=5)
        assert client.api.timeout == 600 and client.ping()
        client.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("host", ["localhost.example.com", "127.0.0.1.example.com", "127.example.com:5000"])
def test_only_a_loopback_registry_is_spoken_to_over_plain_http(host):
    assert RegistryRepository.parse(f"{host}/team/models").base_url.startswith("https://")
    assert RegistryRepository.parse("127.0.0.1:5000/team/models").base_url.startswith("http://")
    assert RegistryRepository.parse("localhost:5000/team/models").base_url.startswith("http://")
