"""A registry repository through the v2 API: tags, manifests, digests."""

from __future__ import annotations

import re
from dataclasses import dataclass

import requests

from triton_release.errors import InfrastructureError, UsageError

MANIFEST_TYPES = ", ".join([
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
])
REPO_REF = re.compile(r"^(?P<host>[A-Za-z0-9.-]+(:[0-9]+)?)/(?P<name>[a-z0-9]+([._/-][a-z0-9]+)*)$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class RegistryRepository:
    host: str
    name: str

    @classmethod
    def parse(cls, ref: str) -> "RegistryRepository":
        match = REPO_REF.match(ref or "")
        if not match:
            raise UsageError(f"""
                {ref!r} is not a registry repository. Give HOST/NAME, such as ghcr.io/org/models or
                127.0.0.1:5000/team/models (lower case, no tag).""")
        return cls(match["host"], match["name"])

    def __str__(self) -> str:
        return f"{self.host}/{self.name}"

    @property
    def base_url(self) -> str:
        local = self.host.startswith(("127.", "localhost"))
        return f"{'http' if local else 'https'}://{self.host}/v2/{self.name}"

    def _request(self, method: str, path: str, **kw) -> requests.Response:
        try:
            return requests.request(method, f"{self.base_url}/{path}", timeout=30, **kw)
        except requests.RequestException as exc:
            raise InfrastructureError(f"""
                The registry {self.host} is unreachable ({exc.__class__.__name__}). Check that it is
                up (locally: `make stack`) and that this machine can reach it.""") from None

    def tags(self) -> list[str]:
        answer = self._request("GET", "tags/list")
        if answer.status_code == 404:
            return []  # the repository does not exist yet
        self._raise_for(answer, "list the tags of")
        return sorted(answer.json().get("tags") or [])

    def digest(self, tag: str) -> str | None:
        answer = self._request("HEAD", f"manifests/{tag}", headers={"Accept": MANIFEST_TYPES})
        if answer.status_code == 404:
            return None
        self._raise_for(answer, f"read tag {tag} of")
        return answer.headers.get("Docker-Content-Digest")

    def _raise_for(self, answer: requests.Response, what: str) -> None:
        if answer.status_code < 400:
            return
        raise InfrastructureError(f"The registry {self.host} refused to {what} {self} "
                                  f"(HTTP {answer.status_code}).")
