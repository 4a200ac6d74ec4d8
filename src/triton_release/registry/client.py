"""A registry repository through the v2 API: tags, manifests, digests, retag, delete.

Auth follows the registry's challenge: anonymous, Basic, or a Bearer token from the realm it
names (GHCR, Docker Hub and most registries). 429 and 5xx answers are retried a few times
with backoff. Credentials live only in `Credentials`, whose repr hides them, and in request
headers; they never reach messages, reports or process arguments.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import requests

from triton_release.errors import InfrastructureError, Refused, UsageError

MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
REPO_REF = re.compile(r"^(?P<host>[A-Za-z0-9.-]+(:[0-9]+)?)/(?P<name>[a-z0-9]+([._/-][a-z0-9]+)*)$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
RETRIES = 4          # attempts for 429 and 5xx
MAX_BACKOFF = 8.0    # seconds, also the cap on a Retry-After we honour
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str = ""  # where they came from, for messages

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=***, source={self.source!r})"

    def docker_auth(self) -> dict:
        """The auth config the Docker API takes (sent in a header, never as an argument)."""
        return {"username": self.username, "password": self.password}


def docker_config_credentials(host: str, env: Mapping[str, str]) -> Credentials | None:
    """`auths` of the Docker config file ($DOCKER_CONFIG/config.json or ~/.docker/config.json)."""
    folder = Path(env.get("DOCKER_CONFIG") or Path(env.get("HOME") or Path.home()) / ".docker")
    path = folder / "config.json"
    try:
        auths = json.loads(path.read_text()).get("auths", {})
    except (OSError, ValueError):
        return None
    for key in (host, f"https://{host}", f"http://{host}", f"https://{host}/v1/"):
        entry = auths.get(key)
        if entry and entry.get("auth"):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                continue
            return Credentials(user, password, str(path))
    return None


def find_credentials(host: str, env: Mapping[str, str], username: str | None = None,
                     password: str | None = None) -> Credentials | None:
    """Given ones (action inputs), else TRITON_RELEASE_USERNAME/_PASSWORD, else the Docker config."""
    if username and password:
        return Credentials(username, password, "inputs")
    user, secret = env.get("TRITON_RELEASE_USERNAME"), env.get("TRITON_RELEASE_PASSWORD")
    if user and secret:
        return Credentials(user, secret, "TRITON_RELEASE_USERNAME/_PASSWORD")
    return docker_config_credentials(host, env)


def open_repository(ref: str, env: Mapping[str, str], username: str | None = None,
                    password: str | None = None) -> "RegistryRepository":
    """The registry repository `ref` with the credentials found for its host."""
    host = RegistryRepository.parse(ref).host
    return RegistryRepository.parse(ref, find_credentials(host, env, username, password))


@dataclass(frozen=True)
class Manifest:
    media_type: str
    body: bytes = field(repr=False)
    digest: str

    @property
    def layers(self) -> list[dict]:
        return json.loads(self.body).get("layers", [])

    @property
    def config_digest(self) -> str:
        return json.loads(self.body).get("config", {}).get("digest", "")


class RegistryRepository:
    def __init__(self, host: str, name: str, credentials: Credentials | None = None) -> None:
        self.host, self.name = host, name
        self.credentials = credentials
        self.session = requests.Session()
        self._token: str | None = None

    @classmethod
    def parse(cls, ref: str, credentials: Credentials | None = None) -> "RegistryRepository":
        match = REPO_REF.match(ref or "")
        if not match:
            raise UsageError(f"""
                {ref!r} is not a registry repository. Give HOST/NAME, such as ghcr.io/org/models or
                127.0.0.1:5000/team/models (lower case, no tag).""")
        return cls(match["host"], match["name"], credentials)

    def __str__(self) -> str:
        return f"{self.host}/{self.name}"

    def __repr__(self) -> str:
        return f"RegistryRepository({self})"

    @property
    def base_url(self) -> str:
        local = self.host.startswith(("127.", "localhost"))
        return f"{'http' if local else 'https'}://{self.host}/v2/{self.name}"

    # -- transport ----------------------------------------------------------------------------

    def _send(self, method: str, url: str, **kw) -> requests.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        elif self._token == "" and self.credentials:
            basic = base64.b64encode(f"{self.credentials.username}:{self.credentials.password}".encode()).decode()
            headers["Authorization"] = f"Basic {basic}"
        for attempt in range(RETRIES):
            try:
                answer = self.session.request(method, url, headers=headers, timeout=60, **kw)
            except requests.RequestException as exc:
                raise InfrastructureError(f"""
                    The registry {self.host} is unreachable ({exc.__class__.__name__}). Check that it is
                    up (locally: `make stack`) and that this machine can reach it.""") from None
            if answer.status_code != 429 and answer.status_code < 500 or attempt == RETRIES - 1:
                return answer
            wait = min(MAX_BACKOFF, 0.5 * 2 ** attempt)
            try:
                wait = min(MAX_BACKOFF, float(answer.headers.get("Retry-After", wait)))
            except ValueError:
                pass
            time.sleep(wait)
        return answer

    def _request(self, method: str, path: str, **kw) -> requests.Response:
        url = f"{self.base_url}/{path}"
        answer = self._send(method, url, **kw)
        if answer.status_code == 401 and self._authenticate(answer):
            answer = self._send(method, url, **kw)
        return answer

    def _authenticate(self, challenge: requests.Response) -> bool:
        """Answer a 401's WWW-Authenticate; True when there is something new to try."""
        header = challenge.headers.get("WWW-Authenticate", "")
        scheme = header.split(" ", 1)[0].lower()
        if scheme == "basic":
            if self.credentials is None or self._token == "":
                return False
            self._token = ""  # "" means: send Basic
            return True
        if scheme != "bearer":
            return False
        params = dict(_CHALLENGE.findall(header))
        realm = params.pop("realm", "")
        if not realm:
            return False
        # the scope this request needs (a token for pull cannot push); with credentials ask for both
        params["scope"] = (f"repository:{self.name}:pull,push" if self.credentials
                           else params.get("scope", f"repository:{self.name}:pull"))
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        try:
            answer = self.session.get(realm, params=params, auth=auth, timeout=30)
        except requests.RequestException as exc:
            raise InfrastructureError(f"The registry's token service {realm} is unreachable "
                                      f"({exc.__class__.__name__}).") from None
        if answer.status_code != 200:
            return False
        data = answer.json()
        self._token = data.get("token") or data.get("access_token")
        return bool(self._token)

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
        kind = "is overloaded" if status == 429 else "failed" if status >= 500 else "refused the request"
        raise InfrastructureError(f"The registry {self.host} {kind} when asked to {what} {self} (HTTP {status}"
                                  f"{', after ' + str(RETRIES) + ' attempts' if status == 429 or status >= 500 else ''}).")

    # -- API ----------------------------------------------------------------------------------

    def tags(self) -> list[str]:
        found: list[str] = []
        path = "tags/list?n=1000"
        while path:
            answer = self._request("GET", path)
            if answer.status_code == 404:
                return []  # the repository does not exist yet
            self._raise_for(answer, "list the tags of")
            found += answer.json().get("tags") or []
            link = answer.headers.get("Link", "")
            match = re.search(r"<[^>]*/tags/list\?([^>]*)>", link)
            path = f"tags/list?{match.group(1)}" if match else ""
        return sorted(set(found))

    def digest(self, tag: str) -> str | None:
        answer = self._request("HEAD", f"manifests/{tag}", headers={"Accept": MANIFEST_TYPES})
        if answer.status_code == 404:
            return None
        self._raise_for(answer, f"read tag {tag} of")
        return answer.headers.get("Docker-Content-Digest")

    def manifest(self, reference: str) -> Manifest | None:
        answer = self._request("GET", f"manifests/{reference}", headers={"Accept": MANIFEST_TYPES})
        if answer.status_code == 404:
            return None
        self._raise_for(answer, f"read {reference} of")
        media_type = answer.headers.get("Content-Type", "").split(";")[0]
        digest = answer.headers.get("Docker-Content-Digest", "")
        return Manifest(media_type, answer.content, digest)

    def blob(self, digest: str) -> bytes:
        answer = self._request("GET", f"blobs/{digest}")
        self._raise_for(answer, f"read blob {digest} of")
        return answer.content

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
        return json.loads(self.blob(manifest.config_digest))

    def put_manifest(self, tag: str, manifest: Manifest) -> str:
        """Point `tag` at `manifest` (a retag: no layer moves). Returns the digest."""
        answer = self._request("PUT", f"manifests/{tag}", data=manifest.body,
                               headers={"Content-Type": manifest.media_type})
        self._raise_for(answer, f"write tag {tag} of")
        return answer.headers.get("Docker-Content-Digest", manifest.digest)

    def delete(self, digest: str) -> None:
        answer = self._request("DELETE", f"manifests/{digest}")
        if answer.status_code == 404:
            return
        self._raise_for(answer, f"delete {digest} from")
