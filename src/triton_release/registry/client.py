"""A registry repository through the v2 API: tags, manifests, blobs, digests, retag, delete.

Auth follows the registry's challenge: anonymous, Basic, or a Bearer token from the realm it
names (GHCR, Docker Hub and most registries), asked for the actions each request needs (`pull`
for reads, `pull,push` for writes, `delete` for a DELETE) and kept per set of actions;
credentials go to a realm only over https or to the registry itself. TLS is verified as Docker
verifies it and plain http is used only where Docker would use it (registry/trust.py); the
scheme that answered is remembered per host for the process. 429 and 5xx answers are retried a
few times with backoff. Every answer must arrive whole within a deadline, however slowly it
trickles. A digest is always the sha256 of the manifest bytes received or sent, never a header's
claim. Credentials live only in `Credentials`, whose repr hides them, and in request headers;
they never reach messages, reports or process arguments.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import hashlib
import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import requests

from triton_release.contract import HUB, HUB_API_HOST, HUB_LIBRARY, parse_digest, parse_repository
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.registry.credentials import Credentials, find_credentials
from triton_release.registry.transport import deadline, watched_session
from triton_release.registry.trust import Trust, is_loopback, speaks_tls, verification_failure
from triton_release.registry.write_once import TagNotOverwritable, refused_overwrite
from triton_release.signals import checkpoint

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
RETRIES = 4  # attempts for 429 and 5xx
MAX_BACKOFF = 8.0  # seconds, also the cap on a Retry-After we honour
CONNECT_TIMEOUT = 10.0  # seconds to open a connection
READ_TIMEOUT = 30.0  # seconds of silence within an answer
DEADLINE = 120.0  # seconds for one whole answer, however slowly it trickles
MAX_PAGES = 1000  # pages of a tag list (1000 tags each)
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
# the token actions each request needs: reads pull, writes push (with pull: a blob or manifest
# write reads first), a DELETE delete alone (the distribution registry asks no more)
_ACTIONS = {"GET": "pull", "HEAD": "pull", "DELETE": "delete"}
_WRITE = "pull,push"
_SCHEMES: dict[str, str] = {}  # host -> the scheme it answered on ("https" or "http"), for this process


def open_repository(
    ref: str,
    env: Mapping[str, str],
    username: str | None = None,
    password: str | None = None,
    *,
    trust: Trust | None = None,
) -> RegistryRepository:
    """The registry repository `ref` with the credentials found for its host, its TLS verified by
    `trust` (default: the system store and the daemon's certs.d)."""
    host = RegistryRepository.parse(ref).host
    return RegistryRepository.parse(ref, find_credentials(host, env, username, password), trust=trust)


def content_digest(body: bytes) -> str:
    """The digest of manifest bytes, as a registry must name them: what reports and comparisons use."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class Manifest:
    media_type: str
    body: bytes = field(repr=False)
    digest: str  # content_digest(body)

    @classmethod
    def of(cls, media_type: str, body: bytes) -> Manifest:
        """Manifest bytes to send, named by their digest."""
        return cls(media_type, body, content_digest(body))

    @property
    def layers(self) -> list[dict]:
        return json.loads(self.body).get("layers", [])

    @property
    def config_digest(self) -> str:
        return json.loads(self.body).get("config", {}).get("digest", "")


def artifact_config(registry: RegistryRepository, manifest: Manifest, media_type: str) -> bytes:
    """The config blob of a small OCI artifact the tool writes (a shard result, the ledger), checked
    to be of `media_type` and to match its digest; ValueError saying what is wrong otherwise."""
    try:
        config = json.loads(manifest.body).get("config") or {}
    except (ValueError, AttributeError):
        raise ValueError("its manifest is not a JSON object") from None
    if not isinstance(config, dict) or config.get("mediaType") != media_type:
        found = config.get("mediaType") if isinstance(config, dict) else None
        raise ValueError(f"its config is {found!r}, not {media_type}")
    digest = str(config.get("digest", ""))
    if parse_digest(digest) is None:
        raise ValueError("its config names no sha256 digest")
    body = registry.blob(digest)
    if content_digest(body) != digest:
        raise ValueError(f"the registry's blob {digest} does not match its digest")
    return body


def reset_in(headers: Mapping[str, str]) -> float | None:
    """Seconds until a rate limit resets, from Retry-After (seconds or an HTTP date) or
    ratelimit-reset (seconds, or a Unix time); None when neither says."""
    retry_after = (headers.get("Retry-After") or "").strip()
    if retry_after:
        with contextlib.suppress(ValueError):
            return max(0.0, float(retry_after))
        with contextlib.suppress(TypeError, ValueError, IndexError):
            return max(0.0, email.utils.parsedate_to_datetime(retry_after).timestamp() - time.time())
    match = re.match(r"\s*(\d+(?:\.\d+)?)", headers.get("ratelimit-reset") or "")
    if match:
        value = float(match.group(1))
        return max(0.0, value - time.time()) if value > 1e9 else value  # a Unix time, or seconds
    return None


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{minutes} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


class RegistryRepository:
    """One repository: `host` is its registry as Docker names it (docker.io for Docker Hub), `name`
    its path there, `ref` the name as the user wrote it (what messages, outputs and labels show)."""

    def __init__(
        self,
        host: str,
        name: str,
        credentials: Credentials | None = None,
        trust: Trust | None = None,
        *,
        ref: str | None = None,
    ) -> None:
        self.host, self.name = host, name
        self.ref = ref or f"{host}/{name}"
        self.credentials = credentials
        self.trust = trust or Trust()
        self._context = self.trust.context(host)
        self.session = watched_session(self._context)
        self._tokens: dict[str, str] = {}  # a bearer token per set of actions ("pull", "pull,push", "delete")
        self._basic = False  # the registry asked for Basic credentials
        self.deadline = DEADLINE  # seconds for one whole answer
        self.max_pages = MAX_PAGES  # of a tag list

    @classmethod
    def parse(
        cls, ref: str, credentials: Credentials | None = None, *, trust: Trust | None = None
    ) -> RegistryRepository:
        found = parse_repository(ref or "")
        if found is None:
            raise UsageError(f"""
                {ref!r} is not a registry repository. Give it as `docker push` takes it, without a tag:
                ghcr.io/org/models, 127.0.0.1:5000/team/models, or team/models for Docker Hub (lower
                case).""")
        if found.hub and found.path.startswith(f"{HUB_LIBRARY}/"):
            raise UsageError(f"""
                {ref!r} is Docker Hub's {found.path}: a name without a namespace is one of Docker Hub's
                official images, which nobody can push to. Put your Docker Hub user or organization in front
                (NAMESPACE/{found.path.removeprefix(HUB_LIBRARY + "/")}), or give another registry's
                HOST/NAME such as ghcr.io/org/models.""")
        return cls(found.registry, found.path, credentials, trust, ref=ref)

    @property
    def api_host(self) -> str:
        """Where the registry's v2 API answers: registry-1.docker.io for Docker Hub, else `host`."""
        return HUB_API_HOST if self.host == HUB else self.host

    def __str__(self) -> str:
        return self.ref

    def __repr__(self) -> str:
        return f"RegistryRepository({self})"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.api_host}/v2/{self.name}"

    @property
    def scheme(self) -> str:
        """https first; plain http only to a registry Docker reaches so when it answers a TLS
        ClientHello with something else: loopback (asked at once), or one of the daemon's insecure
        registries (asked only when https fails there: `_plain_instead`). Asked once per host."""
        known = _SCHEMES.get(self.api_host.lower())
        if known is not None:
            return known
        if not is_loopback(self.api_host):
            return "https"
        tls = speaks_tls(self.api_host, self._context)
        if tls is None:  # nothing answers yet: plain http for now, asked again next time
            return "http"
        _SCHEMES[self.api_host.lower()] = "https" if tls else "http"
        return _SCHEMES[self.api_host.lower()]

    # -- transport ----------------------------------------------------------------------------

    def _exchange(self, method: str, url: str, service: str, **kw: Any) -> requests.Response:
        """One request whose whole answer (headers and body) arrives within `self.deadline`."""
        plain = None
        with deadline(self.deadline) as watch:
            try:
                answer = self.session.request(
                    method, url, timeout=(CONNECT_TIMEOUT, min(READ_TIMEOUT, self.deadline)), **kw
                )
            except requests.RequestException as exc:
                if watch.expired:
                    raise self._too_slow(service) from None
                failure = verification_failure(exc)
                if failure is not None:  # never "unreachable": it answered, with a certificate not trusted here
                    raise self.trust.untrusted(urlsplit(url).netloc, failure, registry=self.host) from None
                plain = self._plain_instead(url, exc)
                if plain is None:
                    raise InfrastructureError(f"""
                        {service} is unreachable ({exc.__class__.__name__}). Check that it is up (locally:
                        `make stack`) and that this machine can reach it.""") from None
        if plain is not None:  # an insecure registry that speaks no TLS: the same request over http
            return self._exchange(method, plain, service, **kw)
        if watch.expired:  # cut, yet it looked complete (an answer without a length): still cut short
            raise self._too_slow(service)
        return answer

    def _plain_instead(self, url: str, exc: requests.RequestException) -> str | None:
        """`url` over plain http, when https to this registry could not connect and Docker would
        use http there: it answers a ClientHello with something else than TLS and the daemon lists
        it as insecure. Remembered for the process. None when https failed otherwise; a plain-http
        registry the daemon does not list is refused, saying so (credentials stay off plain http)."""
        prefix = f"https://{self.api_host}/"
        if (
            not url.startswith(prefix)
            or self.api_host.lower() in _SCHEMES
            or not isinstance(exc, requests.ConnectionError)
        ):
            return None
        if speaks_tls(self.api_host, self._context) is not False:
            return None
        if not self.trust.plain_http_allowed(self.api_host):
            raise InfrastructureError(f"""
                The registry {self.api_host} answers plain http, not https. Docker reaches a registry over
                plain http only when the daemon lists it in insecure-registries (/etc/docker/daemon.json),
                and so does this tool, which sends nothing, credentials least of all, over plain http to
                any other host. Serve the registry over TLS, or add it to the daemon's
                insecure-registries and restart the daemon.""")
        _SCHEMES[self.api_host.lower()] = "http"
        return f"http://{self.api_host}/" + url[len(prefix) :]

    def _too_slow(self, service: str) -> InfrastructureError:
        return InfrastructureError(f"""
            {service} did not finish its answer within {self.deadline:g} s (it answered too slowly or
            stopped part way), so it was given up. Check the registry and the network, then run again.""")

    def _send(self, method: str, url: str, **kw: Any) -> requests.Response:
        headers = dict(kw.pop("headers", {}) or {})
        token = self._tokens.get(_ACTIONS.get(method, _WRITE))
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif self._basic and self.credentials:
            basic = base64.b64encode(f"{self.credentials.username}:{self.credentials.password}".encode()).decode()
            headers["Authorization"] = f"Basic {basic}"
        for attempt in range(RETRIES):
            answer = self._exchange(method, url, f"The registry {self.host}", headers=headers, **kw)
            if answer.status_code != 429 and answer.status_code < 500 or attempt == RETRIES - 1:
                return answer
            if answer.status_code == 429 and self.host == HUB and (reset_in(answer.headers) or 0) > MAX_BACKOFF:
                return answer  # Docker Hub's pull rate limit, reset later than any wait here
            wait = min(MAX_BACKOFF, 0.5 * 2**attempt)
            with contextlib.suppress(ValueError):
                wait = max(0.0, min(MAX_BACKOFF, float(answer.headers.get("Retry-After", wait))))
            checkpoint()
            time.sleep(wait)
        return answer

    def _request(self, method: str, path: str, **kw: Any) -> requests.Response:
        return self._request_url(method, f"{self.base_url}/{path}", **kw)

    def _request_url(self, method: str, url: str, **kw: Any) -> requests.Response:
        answer = self._send(method, url, **kw)
        if answer.status_code == 401 and self._authenticate(answer, _ACTIONS.get(method, _WRITE)):
            answer = self._send(method, url, **kw)
        return answer

    def _json(self, answer: requests.Response, source: str, expected: str) -> dict:
        """The JSON object an answer must be; anything else is a broken registry (or what stands in front)."""
        try:
            data = json.loads(answer.content)
        except ValueError:  # also UnicodeDecodeError
            data = None
        if not isinstance(data, dict):
            kind = answer.headers.get("Content-Type", "").split(";")[0] or "no content type"
            raise InfrastructureError(f"""
                {source} answered with something that is not {expected} (HTTP {answer.status_code}, {kind},
                {len(answer.content)} bytes). Check that {urlsplit(answer.url).netloc or self.host} is a
                container registry, not a login page or proxy standing in front of one.""")
        return data

    def _check_realm(self, realm: str) -> None:
        """Credentials go to a token service over https, or over http only to this very (loopback) registry."""
        parts = urlsplit(realm)
        own = parts.netloc.lower() == self.api_host.lower() and self.base_url.startswith(f"{parts.scheme}://")
        if parts.scheme == "https" or (parts.scheme == "http" and own):
            return
        raise Refused(f"""
            The registry {self.host} asks for credentials to be sent to the token service
            {_without_userinfo(realm)}, which is neither https nor the registry itself; they were not
            sent. Use the registry's https address, or serve its token service over https.""")

    def _authenticate(self, challenge: requests.Response, actions: str) -> bool:
        """Answer a 401's WWW-Authenticate for a request that needs `actions`; True when there is
        something new to try."""
        header = challenge.headers.get("WWW-Authenticate", "")
        scheme = header.split(" ", 1)[0].lower()
        if scheme == "basic":
            if self.credentials is None or self._basic:
                return False
            self._basic = True
            return True
        if scheme != "bearer":
            return False
        params = dict(_CHALLENGE.findall(header))
        realm = params.pop("realm", "")
        if not realm:
            return False
        if self.credentials:
            self._check_realm(realm)
        params["scope"] = f"repository:{self.name}:{actions}"  # what this request needs, no more
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        service = f"The registry's token service {_without_userinfo(realm)}"
        answer = self._exchange("GET", realm, service, params=params, auth=auth)
        if answer.status_code in (401, 403) and self.credentials:
            raise Refused(f"""
                {service} refused to sign in as {self.credentials.username} ({self.credentials.source}) for
                {self} (HTTP {answer.status_code}): the username or the password (token) is wrong, or has
                expired. Give the right ones: the action's username/password inputs,
                TRITON_RELEASE_USERNAME and TRITON_RELEASE_PASSWORD, or `docker login {self.host}`.""")
        if answer.status_code != 200:
            return False
        data = self._json(answer, service, "a token (JSON)")
        token = data.get("token") or data.get("access_token")
        if not isinstance(token, str) or not token:
            return False
        self._tokens[actions] = token
        return True

    def _raise_for(self, answer: requests.Response, what: str) -> None:
        if answer.status_code < 400:
            return
        status = answer.status_code
        if status in (401, 403):
            who = f"as {self.credentials.username} ({self.credentials.source})" if self.credentials else "anonymously"
            raise Refused(f"""
                The registry {self.host} refused to {what} {self} {who} (HTTP {status}). Give credentials
                that may do so: the action's username/password inputs, TRITON_RELEASE_USERNAME and
                TRITON_RELEASE_PASSWORD, or `docker login {self.host}`.""")
        if status == 429 and self.host == HUB:
            raise self._hub_rate_limit(answer, what)
        kind = "is overloaded" if status == 429 else "failed" if status >= 500 else "refused the request"
        raise InfrastructureError(
            f"The registry {self.host} {kind} when asked to {what} {self} (HTTP {status}"
            f"{', after ' + str(RETRIES) + ' attempts' if status == 429 or status >= 500 else ''})."
        )

    def _hub_rate_limit(self, answer: requests.Response, what: str) -> InfrastructureError:
        """Docker Hub's 429: its pull rate limit, when it resets, and that logging in raises it."""
        seconds = reset_in(answer.headers)
        if seconds is None:
            when = "Docker Hub did not say when it resets (no Retry-After or ratelimit-reset)"
        else:
            at = time.strftime("%H:%M UTC", time.gmtime(time.time() + seconds))
            when = f"It resets in {_duration(seconds)} (at {at})"
        who = (
            f"for {self.credentials.username} ({self.credentials.source})"
            if self.credentials
            else "for anonymous pulls, counted per IP address"
        )
        login = (
            "Wait for it, or use an account with a higher limit"
            if self.credentials
            else "Log in for a higher limit: `docker login`, TRITON_RELEASE_USERNAME and TRITON_RELEASE_PASSWORD, or "
            "the action's username/password inputs"
        )
        return InfrastructureError(f"""
            Docker Hub refused to {what} {self} (HTTP 429): its pull rate limit {who} is used up. {when}.
            {login}, then run again.""")

    # -- API ----------------------------------------------------------------------------------

    def tags(self) -> list[str]:
        found: list[str] = []
        path = "tags/list?n=1000"
        read: set[str] = set()
        while path and path not in read:  # a link back to a page already read: the list is complete
            if len(read) >= self.max_pages:
                raise InfrastructureError(f"""
                    The registry {self.host} kept linking to more pages of the tags of {self} after
                    {self.max_pages} pages; its tag list does not end. Check the registry.""")
            read.add(path)
            answer = self._request("GET", path)
            if answer.status_code == 404:
                return []  # the repository does not exist yet
            self._raise_for(answer, "list the tags of")
            tags = self._json(answer, f"The registry {self.host}", f"the tag list of {self} (JSON)").get("tags")
            found += [t for t in tags or [] if isinstance(t, str)]
            link = answer.headers.get("Link", "")
            match = re.search(r"<[^>]*/tags/list\?([^>]*)>", link)
            path = f"tags/list?{match.group(1)}" if match else ""
        return sorted(set(found))

    def digest(self, tag: str) -> str | None:
        """The digest of the manifest `tag` names, computed from its bytes (a GET, not a HEAD: a
        header can be wrong, and only the bytes say which image it is)."""
        manifest = self.manifest(tag)
        return manifest.digest if manifest is not None else None

    def manifest(self, reference: str) -> Manifest | None:
        answer = self._request("GET", f"manifests/{reference}", headers={"Accept": MANIFEST_TYPES})
        if answer.status_code == 404:
            return None
        self._raise_for(answer, f"read {reference} of")
        self._json(answer, f"The registry {self.host}", f"the manifest of {self}:{reference} (JSON)")
        media_type = answer.headers.get("Content-Type", "").split(";")[0]
        return Manifest(media_type, answer.content, content_digest(answer.content))

    def blob(self, digest: str) -> bytes:
        answer = self._request("GET", f"blobs/{digest}")
        self._raise_for(answer, f"read blob {digest} of")
        return answer.content

    def small_blob(self, digest: str, limit: int) -> bytes:
        """The blob `digest`, read only up to `limit` bytes (an image configuration, say) and checked
        against its digest: InfrastructureError when it is larger or does not match."""
        if parse_digest(digest) is None or not digest.startswith("sha256:"):
            raise InfrastructureError(
                f"The registry {self.host} names a blob {digest!r} of {self} that is not sha256:<hex>."
            )
        answer = self._request("GET", f"blobs/{digest}", stream=True)
        try:
            self._raise_for(answer, f"read blob {digest} of")
            body = bytearray()
            for chunk in answer.iter_content(64 * 1024):
                body += chunk
                if len(body) > limit:
                    raise InfrastructureError(
                        f"The registry {self.host} sends a blob {digest} of {self} larger than {limit} bytes, "
                        "more than one of its kind can be: it was not read further."
                    )
        finally:
            answer.close()
        if content_digest(bytes(body)) != digest:
            raise InfrastructureError(f"The registry {self.host}'s blob {digest} of {self} does not match its digest.")
        return bytes(body)

    def image_config(self, reference: str) -> dict:
        """The image configuration (labels under config.Labels) of a tag or digest."""
        manifest = self.manifest(reference)
        if manifest is None:
            return {}
        if "index" in manifest.media_type or "list" in manifest.media_type:
            first = json.loads(manifest.body).get("manifests", [{}])[0].get("digest")
            manifest = self.manifest(first) if first else None
            if manifest is None:
                return {}
        answer = self._request("GET", f"blobs/{manifest.config_digest}")
        self._raise_for(answer, f"read the image configuration of {reference} of")
        return self._json(answer, f"The registry {self.host}", f"the image configuration of {self}:{reference} (JSON)")

    def put_blob(self, data: bytes) -> str:
        """Upload `data` as a blob of this repository (one POST, then one PUT of the whole); a blob
        the repository already holds is not sent again. Returns its digest."""
        digest = content_digest(data)
        if self.has_blob(digest):
            return digest
        url = self._open_upload()
        url += ("&" if urlsplit(url).query else "?") + f"digest={quote(digest, safe='')}"
        answer = self._request_url("PUT", url, data=data, headers={"Content-Type": "application/octet-stream"})
        self._raise_for(answer, f"upload blob {digest} to")
        return digest

    def has_blob(self, digest: str) -> bool:
        """Whether this repository holds the blob `digest` (a HEAD: nothing is read)."""
        known = self._request("HEAD", f"blobs/{digest}")
        if known.status_code == 200:
            return True
        if known.status_code != 404:
            self._raise_for(known, f"look up blob {digest} of")
        return False

    def stream_blob(self, chunks: Iterable[bytes]) -> tuple[str, int]:
        """Upload the blob that `chunks` make, streamed (one POST, one PATCH of the chunks as they
        come, one PUT naming the digest, computed as they went by): a blob of any size, never held
        whole. Returns its digest and size. The registry checks the digest against what it got."""
        sha, size = hashlib.sha256(), 0

        def counted() -> Iterator[bytes]:
            nonlocal size
            for chunk in chunks:
                sha.update(chunk)
                size += len(chunk)
                yield chunk

        url = self._open_upload()
        sent = self._request_url("PATCH", url, data=counted(), headers={"Content-Type": "application/octet-stream"})
        self._raise_for(sent, "upload a blob to")
        url = self._upload_url(sent.headers.get("Location", "") or url)
        digest = "sha256:" + sha.hexdigest()
        url += ("&" if urlsplit(url).query else "?") + f"digest={quote(digest, safe='')}"
        answer = self._request_url("PUT", url, headers={"Content-Length": "0"})
        self._raise_for(answer, f"upload blob {digest} to")
        return digest, size

    def _open_upload(self) -> str:
        """Start a blob upload; the URL to send it to (checked to be this registry's)."""
        started = self._request("POST", "blobs/uploads/")
        self._raise_for(started, "start an upload to")
        location = started.headers.get("Location", "")
        if started.status_code // 100 != 2 or not location:
            raise InfrastructureError(f"""
                The registry {self.host} did not open an upload to {self} (HTTP {started.status_code},
                {"no Location" if not location else "Location given"}). Check that it is a container registry
                that accepts pushes.""")
        return self._upload_url(location)

    def _upload_url(self, location: str) -> str:
        url = urljoin(self.base_url, location)
        if urlsplit(url)[:2] != urlsplit(self.base_url)[:2]:
            elsewhere = _without_userinfo(f"{urlsplit(url).scheme}://{urlsplit(url).netloc}")
            raise Refused(f"""
                The registry {self.host} asked for an upload to go to {elsewhere}, not to itself; nothing
                was sent there, credentials included. Check the registry's configuration (its public
                address).""")
        return url

    def put_manifest(self, tag: str, manifest: Manifest) -> str:
        """Point `tag` at `manifest` (a retag: no layer moves). Returns the digest of the bytes sent."""
        answer = self._request(
            "PUT", f"manifests/{tag}", data=manifest.body, headers={"Content-Type": manifest.media_type}
        )
        said = refused_overwrite(answer.status_code, answer.content)
        if said is not None:  # a write-once repository: the tag exists and may not move
            raise TagNotOverwritable(str(self), tag, answer.status_code, said)
        self._raise_for(answer, f"write tag {tag} of")
        return content_digest(manifest.body)

    def referrers(self, digest: str) -> dict | None:
        """The OCI 1.1 referrers index of `digest`; None when the registry has no referrers API (it
        answers 404, as docker-registry 2.8 does, or anything but an image index)."""
        answer = self._request(
            "GET", f"referrers/{digest}", headers={"Accept": "application/vnd.oci.image.index.v1+json"}
        )
        if answer.status_code != 200:
            return None
        try:
            index = json.loads(answer.content)
        except ValueError:
            return None
        return index if isinstance(index, dict) and isinstance(index.get("manifests"), list) else None

    def open_and_cancel_upload(self) -> None:
        """Open a blob upload and cancel it at once: whether these credentials may push, with nothing
        written (a registry that cannot cancel lets the upload expire)."""
        self._request_url("DELETE", self._open_upload())

    def delete_answer(self, digest: str) -> int:
        """The HTTP status of a DELETE of the manifest `digest`, authentication included, unraised."""
        return self._request("DELETE", f"manifests/{digest}").status_code

    def delete(self, digest: str) -> None:
        answer = self._request("DELETE", f"manifests/{digest}")
        if answer.status_code == 404:
            return
        if answer.status_code in (401, 403) and self.credentials:
            raise Refused(f"""
                The registry {self.host} refused to delete {digest} from {self} as
                {self.credentials.username} ({self.credentials.source}) (HTTP {answer.status_code}): deleting
                needs the delete permission on {self.name} (a token granting the delete action), which these
                credentials do not have. Grant it to them, or give credentials that have it.""")
        self._raise_for(answer, f"delete {digest} from")
