"""The registry client's bearer-token flow, retries and credential sources, against a tiny local
HTTP server that answers like a token-auth registry (the real registry tests are integration)."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from triton_release.errors import InfrastructureError, Refused
from triton_release.registry.client import Credentials, RegistryRepository, docker_config_credentials, find_credentials

USER, PASSWORD, TOKEN = "bot", "s3cret-pw", "tok-123"


class TokenRegistry(BaseHTTPRequestHandler):
    busy = 0           # answer 429 this many times first
    token_requests: list = []

    def log_message(self, *args):
        pass

    def _json(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        port = self.server.server_address[1]
        if self.path.startswith("/token"):
            TokenRegistry.token_requests.append(self.path)
            expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                return self._json(401, {"errors": [{"code": "UNAUTHORIZED"}]})
            return self._json(200, {"token": TOKEN})
        if TokenRegistry.busy:
            TokenRegistry.busy -= 1
            return self._json(429, {}, {"Retry-After": "0"})
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            challenge = (f'Bearer realm="http://127.0.0.1:{port}/token",service="test-registry",'
                         f'scope="repository:team/models:pull"')
            return self._json(401, {"errors": [{"code": "UNAUTHORIZED"}]}, {"WWW-Authenticate": challenge})
        return self._json(200, {"name": "team/models", "tags": ["1.0.0", "latest"]})


@pytest.fixture
def registry():
    server = ThreadingHTTPServer(("127.0.0.1", 0), TokenRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    TokenRegistry.busy = 0
    TokenRegistry.token_requests = []
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_bearer_challenge_is_answered_with_a_token_from_the_realm(registry):
    repo = RegistryRepository.parse(f"{registry}/team/models", Credentials(USER, PASSWORD))
    assert repo.tags() == ["1.0.0", "latest"]
    assert "service=test-registry" in TokenRegistry.token_requests[0]
    assert "scope=repository%3Ateam%2Fmodels%3Apull%2Cpush" in TokenRegistry.token_requests[0]  # a token that can push


def test_wrong_credentials_are_refused_naming_the_user_not_the_password(registry):
    repo = RegistryRepository.parse(f"{registry}/team/models", Credentials(USER, "wrong-pw", "inputs"))
    with pytest.raises(Refused) as refused:
        repo.tags()
    assert "as bot (inputs)" in str(refused.value) and "wrong-pw" not in str(refused.value)


def test_429_is_retried_with_backoff_and_then_given_up(registry):
    repo = RegistryRepository.parse(f"{registry}/team/models", Credentials(USER, PASSWORD))
    TokenRegistry.busy = 2
    assert repo.tags() == ["1.0.0", "latest"]
    TokenRegistry.busy = 100
    with pytest.raises(InfrastructureError, match=r"is overloaded .*HTTP 429, after 4 attempts"):
        RegistryRepository.parse(f"{registry}/team/models", Credentials(USER, PASSWORD)).tags()


def test_credentials_come_from_inputs_then_environment_then_docker_config(tmp_path, monkeypatch):
    monkeypatch.delenv("TRITON_RELEASE_USERNAME", raising=False)
    monkeypatch.delenv("TRITON_RELEASE_PASSWORD", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    auth = base64.b64encode(b"docker-user:docker-pw").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"ghcr.io": {"auth": auth}}}))
    assert docker_config_credentials("ghcr.io") == Credentials("docker-user", "docker-pw", str(tmp_path / "config.json"))
    assert find_credentials("ghcr.io").username == "docker-user"
    monkeypatch.setenv("TRITON_RELEASE_USERNAME", "env-user")
    monkeypatch.setenv("TRITON_RELEASE_PASSWORD", "env-pw")
    assert find_credentials("ghcr.io").username == "env-user"
    assert find_credentials("ghcr.io", "input-user", "input-pw").source == "inputs"
    assert "env-pw" not in repr(find_credentials("ghcr.io"))
