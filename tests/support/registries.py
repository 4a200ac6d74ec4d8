"""Registries for tests. `LocalRegistry` is a real docker-registry process (integration tests
that stop a registry or need a password). `FakeRegistry` is a loopback HTTP server in the test's
own process that answers only what a test sets it up to answer: one status for every request, or
a bearer-token registry's challenge, token and tag list."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

from support.stack import BASE_IMAGE, REGISTRY
from triton_release.registry.client import MANIFEST_TYPES, Manifest, RegistryRepository


@dataclass(frozen=True)
class BaseLayers:
    """The stand-in base image's layers as a registry stores them: the blobs a private registry is
    seeded with, so that a test's first push to it sends the model's layers only (the daemon finds
    the base's already there) instead of half a gigabyte."""

    blobs: Path  # a registry's blob store holding them
    digests: tuple[str, ...]

    @classmethod
    def pushed(cls, docker_client, state: Path) -> tuple[BaseLayers, LocalRegistry]:
        """BASE_IMAGE pushed once to a registry of its own in `state` (stopped at once, its storage
        kept): the layers, and that registry, for the caller to clean up."""
        registry = LocalRegistry(state)
        repository = f"{registry.address}/seed/base"
        docker_client.images.get(BASE_IMAGE).tag(repository, "base")
        try:
            for line in docker_client.api.push(repository, "base", stream=True, decode=True):
                if "error" in line:
                    raise RuntimeError(f"pushing {BASE_IMAGE} to {registry.address}: {line['error']}")
            manifest = requests.get(
                f"http://{registry.address}/v2/seed/base/manifests/base",
                headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
                timeout=30,
            )
            manifest.raise_for_status()
        finally:
            docker_client.images.remove(f"{repository}:base")
            registry.stop()
        digests = tuple(layer["digest"] for layer in manifest.json()["layers"])
        return cls(state / "data" / "docker" / "registry" / "v2" / "blobs", digests), registry

    def seed(self, storage: Path, repository: str) -> None:
        """Hard links to the base's blobs in `storage` (a registry's rootdirectory), linked into
        `repository` as pushed layers are. Blobs are never rewritten in place: sharing is safe."""
        v2 = storage / "docker" / "registry" / "v2"
        for digest in self.digests:
            hexdigest = digest.removeprefix("sha256:")
            blob = v2 / "blobs" / "sha256" / hexdigest[:2] / hexdigest
            blob.mkdir(parents=True, exist_ok=True)
            os.link(self.blobs / "sha256" / hexdigest[:2] / hexdigest / "data", blob / "data")
            link = v2 / "repositories" / repository / "_layers" / "sha256" / hexdigest
            link.mkdir(parents=True, exist_ok=True)
            (link / "link").write_text(digest)


class LocalRegistry:
    """A private docker-registry process on a free loopback port (optionally with basic auth),
    for the tests that stop a registry or need a password; with `base`, its `repository` holds
    the base image's layers from the start."""

    def __init__(
        self,
        state: Path,
        user: tuple[str, str] | None = None,
        *,
        base: BaseLayers | None = None,
        repository: str = "team/models",
    ) -> None:
        import bcrypt

        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        if base is not None:
            base.seed(state / "data", repository)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.address = f"127.0.0.1:{sock.getsockname()[1]}"
        auth = ""
        if user:
            digest = bcrypt.hashpw(user[1].encode(), bcrypt.gensalt(5)).decode()
            (state / "htpasswd").write_text(f"{user[0]}:{digest}\n")
            auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {state / 'htpasswd'}\n"
        (state / "config.yml").write_text(
            "version: 0.1\nlog:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {state / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n{auth}"
        )
        self.process = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["docker-registry", "serve", str(self.state / "config.yml")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:
                requests.get(f"http://{self.address}/v2/", timeout=1)
                return
            except requests.RequestException:
                time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not start on {self.address}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None


class FakeRegistry:
    """A loopback HTTP server answering like a registry, as far as it is set up to.

    With `status`, every request of any method gets that status and an empty body (a 401 with a
    Basic challenge, a 429 with Retry-After: 0). Without, it is a bearer-token registry: GET /token
    hands out `token` for Basic `user`:`password` and records its query in `token_requests`; any
    other request answers 429 (Retry-After: 0) while `busy` counts down, then wants the bearer
    token (a 401 challenge naming `realm`, by default its own /token, service and scope otherwise).
    With `auth=False` it wants no token. It answers `repository`'s tag list (with a `link` header
    when set) and its `manifests` (reference -> (media type, bytes); a PUT stores one), with
    `digest_header`, when set, as every manifest's Docker-Content-Digest (a lying registry).

    `hook(handler)` sees every request first and may answer it itself (return True): a trickle,
    HTML, a rival's write. `requests` lists (method, path) of each. `stopping` is set on close, for
    hooks that wait. With `tls` (a server SSLContext) it speaks https, its realm too. Use it as a
    context manager; `address` is host:port."""

    def __init__(
        self,
        *,
        tls=None,
        status: int | None = None,
        user: str = "bot",
        password: str = "s3cret-pw",
        token: str = "tok-123",
        repository: str = "team/models",
        tags: tuple[str, ...] = ("1.0.0", "latest"),
        auth: bool = True,
        realm: str | None = None,
        hook=None,
    ) -> None:
        self.status = status
        self.user, self.password, self.token = user, password, token
        self.repository, self.tags = repository, list(tags)
        self.auth, self.hook = auth, hook
        self.busy = 0
        self.link: str | None = None
        self.manifests: dict[str, tuple[str, bytes]] = {}
        self.digest_header: str | None = None
        self.token_requests: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.stopping = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        if tls is not None:  # the handshake in the handler's thread, not in the accepting one
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
            self.server.handle_error = lambda *_: None  # a client that refused the certificate
        self.server.daemon_threads = True
        self.server.fake = self
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.realm = realm or f"{'https' if tls is not None else 'http'}://{self.address}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeRegistry:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: dict | bytes | None = None, headers: dict | None = None) -> None:
        data = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if isinstance(body, dict):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _answer(self) -> None:
        fake: FakeRegistry = self.server.fake
        fake.requests.append((self.command, self.path))
        if fake.hook is not None and fake.hook(self):
            return
        if fake.status is not None:
            headers = {401: {"WWW-Authenticate": 'Basic realm="test"'}, 429: {"Retry-After": "0"}}
            return self._send(fake.status, headers=headers.get(fake.status))
        if self.path.startswith("/token"):
            if self.command != "GET":
                return self._send(405)
            fake.token_requests.append(self.path)
            expected = "Basic " + base64.b64encode(f"{fake.user}:{fake.password}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                return self._send(401, {"errors": [{"code": "UNAUTHORIZED"}]})
            return self._send(200, {"token": fake.token})
        if fake.busy:
            fake.busy -= 1
            return self._send(429, {}, {"Retry-After": "0"})
        if fake.auth and self.headers.get("Authorization") != f"Bearer {fake.token}":
            challenge = f'Bearer realm="{fake.realm}",service="test-registry",scope="repository:{fake.repository}:pull"'
            return self._send(401, {"errors": [{"code": "UNAUTHORIZED"}]}, {"WWW-Authenticate": challenge})
        prefix = f"/v2/{fake.repository}/"
        path = self.path.split("?", 1)[0]
        if self.command == "GET" and path == prefix + "tags/list":
            link = {"Link": fake.link} if fake.link else {}
            return self._send(200, {"name": fake.repository, "tags": fake.tags}, link)
        if path.startswith(prefix + "manifests/"):
            return self._manifest(fake, path[len(prefix + "manifests/") :])
        return self._send(404, {"errors": [{"code": "NAME_UNKNOWN"}]})

    def _manifest(self, fake: FakeRegistry, reference: str) -> None:
        if self.command == "PUT":
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            fake.manifests[reference] = fake.manifests[digest] = (self.headers.get("Content-Type", ""), body)
            return self._send(201, None, {"Docker-Content-Digest": fake.digest_header or digest})
        if self.command not in ("GET", "HEAD"):
            return self._send(405)
        if reference not in fake.manifests:
            return self._send(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
        media_type, body = fake.manifests[reference]
        digest = fake.digest_header or "sha256:" + hashlib.sha256(body).hexdigest()
        return self._send(200, body, {"Content-Type": media_type, "Docker-Content-Digest": digest})

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _answer


# -- a proxy in front of the real registry -----------------------------------------------------

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class RegistryProxy:
    """A loopback HTTP proxy to a real registry (`upstream`, the stack's by default).
    `on_manifest_put(proxy, path, forward)` runs for every manifest PUT of tag `tag` instead of the
    plain forward: it calls `forward()` (which sends the PUT on and returns the registry's answer)
    when and as it likes; `on_blob_put` likewise for each blob upload's closing PUT.

    `RegistryProxy.write_once()` is a write-once (immutable) repository in front of the registry:
    every manifest PUT onto a tag that already exists is refused exactly as ECR refuses it in an
    IMMUTABLE repository (HTTP 400, TAG_INVALID), whatever the manifest; `refused` lists the tags."""

    def __init__(self, tag: str | None, on_manifest_put, *, upstream: str = REGISTRY, on_blob_put=None) -> None:
        self.tag, self.on_manifest_put, self.upstream = tag, on_manifest_put, upstream
        self.on_blob_put = on_blob_put  # (proxy, path, forward), for every blob upload's closing PUT
        self.refused: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Forward)
        self.server.daemon_threads = True
        self.server.proxy = self
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @classmethod
    def write_once(cls, upstream: str = REGISTRY) -> RegistryProxy:
        return cls(None, _refuse_an_existing_tag, upstream=upstream)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> RegistryProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_MANIFEST_PATH = re.compile(r"/v2/(?P<name>.+)/manifests/(?P<reference>[^/?]+)")


def _refuse_an_existing_tag(proxy: RegistryProxy, path: str, forward):
    """ECR's IMMUTABLE: a PUT onto a tag that exists is refused (400 TAG_INVALID); a new tag, or a
    manifest put by its digest, goes through."""
    match = _MANIFEST_PATH.fullmatch(path.split("?")[0])
    if match is None or match["reference"].startswith("sha256:"):
        return forward()
    status, _, _ = send(
        "HEAD", path.split("?")[0], {"Accept": MANIFEST_TYPES, "Host": proxy.address}, b"", proxy.upstream
    )
    if status != 200:
        return forward()
    proxy.refused.append(match["reference"])
    body = ecr_refusal(match["name"], match["reference"])
    return 400, [("Content-Type", "application/json; charset=utf-8")], body


def send(
    method: str, path: str, headers: dict, body: bytes, upstream: str = REGISTRY
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request to the real registry; the Host header stays the proxy's, so that the upload
    locations it answers point back through the proxy."""
    connection = http.client.HTTPConnection(upstream, timeout=120)
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
            try:
                return send(self.command, self.path, headers, body, proxy.upstream)
            except OSError as exc:  # the registry is gone: what a proxy in front of it answers
                return 502, [("Content-Type", "text/plain")], f"upstream {proxy.upstream}: {exc}".encode()

        if self.command == "PUT" and (
            self.path.split("?")[0].endswith(f"/manifests/{proxy.tag}")
            if proxy.tag is not None
            else "/manifests/" in self.path
        ):
            status, answer_headers, answer_body = proxy.on_manifest_put(proxy, self.path, forward)
        elif self.command == "PUT" and "/blobs/uploads/" in self.path and proxy.on_blob_put is not None:
            status, answer_headers, answer_body = proxy.on_blob_put(proxy, self.path, forward)
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


def copy_repository(source: RegistryRepository, target: RegistryRepository) -> None:
    """Every tag of `source` (a repository of the local, password-free registry) in `target` of the
    same registry, by the same manifests byte for byte: the blobs are mounted, not sent. A test
    branches from another's releases without making them again; nothing in a release names its
    repository, so the copy is the history a release in `target` would have left."""
    for tag in source.tags():
        manifest = source.manifest(tag)
        assert manifest is not None, f"{source}:{tag} is listed but gone"
        _copy_contents(source, target, manifest)
        target.put_manifest(tag, manifest)


def _copy_contents(source: RegistryRepository, target: RegistryRepository, manifest: Manifest) -> None:
    body = json.loads(manifest.body)
    for child in body.get("manifests") or []:  # an index: its manifests first, by digest
        found = source.manifest(child["digest"])
        assert found is not None, f"{source}@{child['digest']} is named by an index but gone"
        _copy_contents(source, target, found)
        target.put_manifest(child["digest"], found)
    for blob in [body["config"], *body.get("layers", [])] if "config" in body else []:
        mounted = requests.post(
            f"http://{target.host}/v2/{target.name}/blobs/uploads/",
            params={"mount": blob["digest"], "from": source.name},
            timeout=60,
        )
        assert mounted.status_code == 201, (blob["digest"], mounted.status_code, mounted.text[:200])


def ecr_refusal(repository: str, tag: str) -> bytes:
    """ECR's answer to a manifest PUT onto an existing tag of an IMMUTABLE repository (HTTP 400)."""
    message = (
        f"The image tag '{tag}' already exists in the '{repository}' repository and cannot be overwritten "
        "because the repository is immutable."
    )
    return json.dumps({"errors": [{"code": "TAG_INVALID", "message": message}]}).encode()


class MemoryRegistry:
    """A registry repository in memory, as the v2 client shows one (tags, manifests, blobs): for unit
    tests of what the tool writes. `write_once`: a PUT onto an existing tag is refused as ECR's
    IMMUTABLE repositories refuse it. `puts` lists the tags written, `reads` the references read."""

    def __init__(self, write_once: bool = False, name: str = "team/models") -> None:
        self.write_once, self.name = write_once, name
        self.manifests: dict[str, Manifest] = {}
        self.blobs: dict[str, bytes] = {}
        self.puts: list[str] = []
        self.reads: list[str] = []

    def __str__(self) -> str:
        return f"127.0.0.1:5000/{self.name}"

    def tags(self) -> list[str]:
        return sorted(t for t in self.manifests if not t.startswith("sha256:"))

    def manifest(self, reference: str) -> Manifest | None:
        self.reads.append(reference)
        return self.manifests.get(reference)

    def digest(self, reference: str) -> str | None:
        found = self.manifests.get(reference)
        return found.digest if found else None

    def put_manifest(self, tag: str, manifest: Manifest) -> str:
        from triton_release.registry.write_once import TagNotOverwritable, refused_overwrite

        if self.write_once and tag in self.manifests:
            body = ecr_refusal(self.name, tag)
            raise TagNotOverwritable(str(self), tag, 400, refused_overwrite(400, body) or "")
        self.puts.append(tag)
        self.manifests[tag] = self.manifests[manifest.digest] = manifest
        return manifest.digest

    def put_blob(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest

    def blob(self, digest: str) -> bytes:
        return self.blobs[digest]

    def image_config(self, reference: str) -> dict:
        manifest = self.manifests.get(reference)
        if manifest is None:
            return {}
        config = self.blobs.get(manifest.config_digest)
        return json.loads(config) if config else {}

    def image(self, labels: dict, layer: str = "a") -> Manifest:
        """An image pushed to it (by digest only, as the daemon's blobs are): its config holds `labels`."""
        config = json.dumps({"config": {"Labels": labels}, "rootfs": {"diff_ids": []}}).encode()
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"digest": self.put_blob(config), "size": len(config)},
                "layers": [{"digest": "sha256:" + hashlib.sha256(layer.encode()).hexdigest(), "size": 1}],
            }
        ).encode()
        manifest = Manifest.of("application/vnd.oci.image.manifest.v1+json", body)
        self.manifests[manifest.digest] = manifest
        return manifest


# -- a self-hosted registry: TLS from a private CA, token auth ----------------------------------


class TokenService:
    """The Docker token spec's service, over TLS (`tls`, a server SSLContext) on a free loopback
    port: GET /token?service=..&scope=repository:NAME:ACTIONS with Basic credentials is answered
    with an RS256 JWT (header `kid`: the signing key's libtrust id) granting what the user may of
    what was asked (`users`: name -> (password, the actions it may)); anonymous asks get an empty
    grant, wrong credentials 401. `asked` lists (user, scopes, User-Agent) of each request, as asked
    (the Docker daemon's pushes and pulls ask too)."""

    def __init__(self, tls, signing, users: dict[str, tuple[str, set[str]]], *, service: str, issuer: str) -> None:
        self.signing, self.users, self.service, self.issuer = signing, users, service, issuer
        self.asked: list[tuple[str, str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenHandler)
        self.server.socket = tls.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.server.handle_error = lambda *_: None  # a client that refused the certificate
        self.server.daemon_threads = True
        self.server.tokens = self
        self.realm = f"https://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, user: str, scopes: list[str]) -> str:
        import uuid

        import jwt

        allowed = self.users[user][1] if user else set()
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            granted = [a for a in actions.split(",") if a in allowed]
            if kind == "repository" and name:
                access.append({"type": "repository", "name": name, "actions": granted})
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": user,
            "aud": self.service,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        return jwt.encode(claims, self.signing.pem, algorithm="RS256", headers={"kid": self.signing.kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _TokenHandler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def log_message(self, *args):
        pass

    def do_GET(self):
        from urllib.parse import parse_qs, urlsplit

        tokens: TokenService = self.server.tokens
        query = parse_qs(urlsplit(self.path).query)
        scopes = query.get("scope", [])
        user = ""
        header = self.headers.get("Authorization", "")
        if header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            if user not in tokens.users or tokens.users[user][0] != password:
                tokens.asked.append((user, " ".join(scopes), self.headers.get("User-Agent", "")))
                return self._answer(401, {"errors": [{"code": "UNAUTHORIZED", "message": "wrong credentials"}]})
        tokens.asked.append((user, " ".join(scopes), self.headers.get("User-Agent", "")))
        token = tokens.token(user, scopes)
        return self._answer(200, {"token": token, "access_token": token, "expires_in": 300})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class TokenRegistry:
    """Debian's docker-registry serving TLS itself (a certificate from `ca` for 127.0.0.1) with
    `auth: token` against a `TokenService` of its own (TLS from the same CA), on free loopback
    ports, its storage in `state`; with `base`, `repository` holds the base image's layers from
    the start. `users`: name -> (password, the actions it may). `address` is host:port."""

    SERVICE = "triton-release-test-registry"
    ISSUER = "triton-release-test-token-issuer"

    def __init__(
        self, state: Path, ca, users: dict[str, tuple[str, set[str]]], *, base=None, repository: str = "team/models"
    ) -> None:
        from support.tls import SigningKey

        state.mkdir(parents=True, exist_ok=True)
        self.state, self.ca = state, ca
        if base is not None:
            base.seed(state / "data", repository)
        issued = ca.issue("registry")
        self.signing = SigningKey.made(state, self.ISSUER)
        self.tokens = TokenService(
            issued.server_context(), self.signing, users, service=self.SERVICE, issuer=self.ISSUER
        )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.address = f"127.0.0.1:{sock.getsockname()[1]}"
        (state / "config.yml").write_text(
            "version: 0.1\nlog:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {state / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n  tls:\n    certificate: {issued.cert}\n    key: {issued.key}\n"
            f"auth:\n  token:\n    realm: {self.tokens.realm}\n    service: {self.SERVICE}\n"
            f"    issuer: {self.ISSUER}\n    rootcertbundle: {self.signing.certificate}\n"
        )
        self.log = state / "registry.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                ["docker-registry", "serve", str(state / "config.yml")], stdout=log, stderr=subprocess.STDOUT
            )
        for _ in range(100):
            try:
                requests.get(f"https://{self.address}/v2/", timeout=1, verify=str(ca.cert))
                return
            except requests.RequestException:
                time.sleep(0.1)
        self.close()
        raise RuntimeError(f"docker-registry with TLS did not start on {self.address}:\n{self.log.read_text()[-2000:]}")

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None
        self.tokens.close()
