"""What a registry repository lets these credentials do, asked without changing anything: `doctor`
tells before the first release whether its push, its retention (`--keep`) and its evidence (the
OCI 1.1 referrers API) will work.

- push: an upload is opened and at once cancelled (no blob is written);
- delete: a manifest that cannot exist (the digest of no bytes anyone stores) is deleted: a
  registry checks the permission before it looks, so 404 means "may delete", 401/403 "may not"
  and 405 "deletes are switched off";
- referrers: the referrers of that same absent digest are asked for: an image index (empty) is
  the API, anything else is its absence.
"""

from __future__ import annotations

from dataclasses import dataclass

from triton_release.errors import InfrastructureError, Refused
from triton_release.registry.client import RegistryRepository

ABSENT = "sha256:" + "0" * 64  # no content hashes to this: never a stored manifest


@dataclass(frozen=True)
class Permission:
    allowed: bool | None  # None: the registry's answer did not tell
    detail: str


def may_push(registry: RegistryRepository) -> Permission:
    try:
        registry.open_and_cancel_upload()
    except Refused as exc:
        return Permission(False, " ".join(str(exc).split()))
    return Permission(True, "an upload was opened and cancelled")


def may_delete(registry: RegistryRepository) -> Permission:
    status = registry.delete_answer(ABSENT)
    if status in (404, 202):
        return Permission(True, f"a delete was accepted for checking (HTTP {status})")
    if status in (401, 403):
        return Permission(False, f"deletes are refused for these credentials (HTTP {status})")
    if status == 405:
        return Permission(False, "the registry has deletes switched off (HTTP 405)")
    return Permission(None, f"the registry answered a delete with HTTP {status}")


def has_referrers_api(registry: RegistryRepository) -> bool:
    try:
        return registry.referrers(ABSENT) is not None
    except InfrastructureError:
        return False
