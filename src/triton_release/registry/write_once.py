"""Write-once repositories: a registry that refuses to point an existing tag anywhere else.

ECR repositories with IMMUTABLE tag mutability answer a manifest PUT to a tag that exists with HTTP
400 and the error code TAG_INVALID ("The image tag 'latest' already exists in the 'x' repository
and cannot be overwritten because the repository is immutable"); Harbor's immutability rules and
other write-once registries answer 403, 409 or 412 with a message saying so. Such an answer is the
named refusal `TagNotOverwritable` (exit 1): which tag, that the repository forbids overwriting
tags, and the ways out: `tags: version`, which moves no tag, the channel then pointed by `rollback`
where the repository exempts it (ECR's IMMUTABLE_WITH_EXCLUSION), or every moving tag exempted
(docs/tags.md lists every tag the tool writes).
"""

from __future__ import annotations

import json
import re

from triton_release.errors import Refused

# what a write-once registry says when it refuses an overwrite (ECR, Harbor, others)
_IMMUTABLE = re.compile(r"immutab|overwrit|already exists", re.IGNORECASE)
REFUSING_STATUSES = (400, 403, 409, 412)
ECR_CODE = "TAG_INVALID"


def _errors(body: bytes) -> list[dict]:
    """The registry's `errors` list (the distribution spec's error body); [] for anything else."""
    try:
        found = json.loads(body).get("errors")
    except (ValueError, AttributeError):
        return []
    return [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []


def refused_overwrite(status: int, body: bytes) -> str | None:
    """The registry's own words when the answer `status`, `body` to a manifest PUT refuses to
    overwrite an existing tag; None when it is any other answer. A 400 counts only with ECR's
    TAG_INVALID code (and ECR's words); 403, 409 and 412 when their body speaks of an immutable
    tag, an overwrite or a tag that already exists (a plain 403 is a credentials refusal)."""
    if status not in REFUSING_STATUSES:
        return None
    errors = _errors(body)
    said = " ".join(str(e.get("message", "")) for e in errors) or body[:300].decode("utf-8", "replace")
    if status == 400:
        ecr = any(e.get("code") == ECR_CODE for e in errors)
        return said.strip() if ecr and _IMMUTABLE.search(said) else None
    return said.strip() if _IMMUTABLE.search(said) else None


class TagNotOverwritable(Refused):
    """The registry refused to overwrite an existing tag: the repository is write-once."""

    def __init__(self, repository: str, tag: str, status: int, said: str, done: str = "") -> None:
        self.repository, self.tag, self.status, self.said = repository, tag, status, said
        super().__init__(f"""
            {repository} refused to overwrite the tag {tag} (HTTP {status}: {said.rstrip(".")}): the
            repository forbids overwriting tags (ECR's IMMUTABLE tag mutability, a Harbor immutability
            rule or the like). {done} Set `tags: version` (--tags version, action input tags): a release
            then writes only X.Y.Z and sha-<12 hex>, new with each release, and moves no tag; point the
            channel with `rollback --to-version X.Y.Z` where the repository exempts it (ECR:
            IMMUTABLE_WITH_EXCLUSION, with exclusion filters for the channel and triton-release.rollback.*).
            Or exempt every tag that moves: "Tags the tool writes" in the docs lists them.""")

    def having(self, done: str) -> TagNotOverwritable:
        """The same refusal, saying what the run had done when it came."""
        return TagNotOverwritable(self.repository, self.tag, self.status, self.said, done)
