"""The release commit and its vX.Y.Z tag, pushed back to the branch the checkout came from.

This runs once the release is in the registry: the release is published whatever the remote
says. A push the remote refuses (branch protection, a pre-receive hook, a branch that moved on,
no credentials) is a warning with the fix, never a failed release; the registry keeps the record
of released versions either way.

The push uses the credentials the checkout already has: actions/checkout keeps the workflow's
token in the checkout's git config, so a plain `git push origin ...` is authenticated. Nothing
here reads or prints them, and any user:password@ in git's messages is blanked before it is
shown or reported. git never prompts (GIT_TERMINAL_PROMPT=0, no stdin): a missing credential
is a refusal, not a hang.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.errors import InfrastructureError

log = logging.getLogger("triton_release")

if TYPE_CHECKING:
    from triton_release.history.commit import Committed


REMOTE = "origin"
TIMEOUT = 300  # seconds: a remote that stops answering is a refusal, not a stuck release
_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")  # the user:password@ of a URL
_NO_ATOMIC = "does not support --atomic"


@dataclass(frozen=True)
class PushTarget:
    """Where the release commit goes: `branch` of `remote`; branch None: the checkout's current one."""

    branch: str | None = None
    remote: str = REMOTE

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PushTarget:
        """Inside GitHub Actions, the branch the workflow runs for: a pull request's head branch
        (GITHUB_HEAD_REF), else the pushed or dispatched branch (GITHUB_REF, when it is a branch:
        a tag's run names no branch). Elsewhere None: the checkout's current branch."""
        if env.get("GITHUB_HEAD_REF"):
            return cls(env["GITHUB_HEAD_REF"])
        ref = env.get("GITHUB_REF", "")
        if ref.startswith("refs/heads/"):
            return cls(ref.removeprefix("refs/heads/"))
        if env.get("GITHUB_REF_TYPE") == "branch" and env.get("GITHUB_REF_NAME"):
            return cls(env["GITHUB_REF_NAME"])
        return cls()


@dataclass(frozen=True)
class PushedBack:
    """What became of the push: `pushed`, `refused` by the remote, or `skipped` (nothing to push to)."""

    outcome: str
    remote: str
    branch: str | None
    tag: str
    refs: tuple[str, ...]  # the refspecs pushed, or that would have been
    reason: str = ""  # why not, in git's or the remote's words
    atomic: bool = False  # all refs or none (the remote supports --atomic)

    @property
    def pushed(self) -> bool:
        return self.outcome == "pushed"

    @property
    def with_commit(self) -> bool:
        """Whether the release commit goes too (else the tag alone: the release needed no commit)."""
        return any(":refs/heads/" in ref for ref in self.refs)

    def to_json(self) -> dict:
        return {
            "outcome": self.outcome,
            "remote": self.remote,
            "branch": self.branch,
            "tag": self.tag,
            "refs": list(self.refs),
            "atomic": self.atomic,
            **({"reason": self.reason} if self.reason else {}),
        }


def redact(text: str) -> str:
    """`text` with the credentials of any URL in it blanked."""
    return _CREDENTIALS.sub("***@", text)


def _git(root: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        return subprocess.run(
            ["git", *args],
            cwd=root,
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=timeout,
        )
    except FileNotFoundError:
        raise InfrastructureError("git is not installed: install it (apt-get install git).") from None


def _branch(root: Path, target: PushTarget) -> str | None:
    if target.branch:
        return target.branch
    found = _git(root, "symbolic-ref", "--quiet", "--short", "HEAD")
    return (found.stdout.strip() or None) if found.returncode == 0 else None


def _reason(result: subprocess.CompletedProcess) -> str:
    """Why the remote refused: each rejected ref's reason (porcelain `!` lines), and what the
    remote said (`remote:` lines: a hook's message, GitHub's protected-branch error); else git's
    own last words (a missing credential, an unreachable remote)."""
    rejected = []
    for line in result.stdout.splitlines():
        fields = line.split("\t")
        if len(fields) >= 3 and fields[0] == "!":
            ref = fields[1].rpartition(":")[2].removeprefix("refs/heads/").removeprefix("refs/tags/")
            if "atomic push failed" not in fields[2]:
                rejected.append(f"{ref} {fields[2].strip()}")
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    remote = [line for line in lines if line.startswith("remote:") and line != "remote:"][:5]
    said = rejected + remote if rejected or remote else lines[-2:]
    return redact("; ".join(said) or f"git push exited with {result.returncode}")


def _tag_exists(result: subprocess.CompletedProcess, tag: str) -> bool:
    """Whether the remote refused `tag` because it holds that tag already (git's `[rejected]
    (already exists)`, or a server's `[remote rejected] (... already exists)`)."""
    for line in result.stdout.splitlines():
        fields = line.split("\t")
        if (
            len(fields) >= 3
            and fields[0] == "!"
            and fields[1].rpartition(":")[2] == f"refs/tags/{tag}"
            and "already exists" in fields[2]
        ):
            return True
    return False


def _push(root: Path, remote: str, refs: list[str], atomic: bool) -> subprocess.CompletedProcess:
    return _git(root, "push", *(["--atomic"] if atomic else []), "--porcelain", remote, *refs, timeout=TIMEOUT)


def push_release(root: Path, committed: Committed, target: PushTarget) -> PushedBack:
    """Push the release commit (when one was made) to `target`'s branch and the tag, atomically
    where the remote supports it; only the tag when the release needed no commit. Never raises
    for a refusal: it is logged as a warning with the fix and returned."""
    tag = committed.tag
    branch = _branch(root, target)
    refs = ([f"{committed.commit}:refs/heads/{branch}"] if committed.committed and branch else []) + [
        f"refs/tags/{tag}:refs/tags/{tag}"
    ]
    release = f"release {committed.version}" if committed.version else tag
    what = f"its release commit and tag {tag} were" if committed.committed else f"its tag {tag} was"

    def warn(outcome: str, reason: str, fix: str, atomic: bool = False) -> PushedBack:
        log.warning(
            f"{release} is published, but {what} not pushed to {target.remote}{' ' + branch if branch else ''}: "
            f"{reason}. {fix}"
        )
        return PushedBack(outcome, target.remote, branch, tag, tuple(refs), reason, atomic)

    if _git(root, "remote", "get-url", target.remote).returncode != 0:  # the URL itself is never shown
        return warn(
            "skipped",
            f"the checkout has no remote {target.remote}",
            f"Only this checkout has the release commit and tag: push with `git push <remote> "
            f"HEAD:refs/heads/<branch> refs/tags/{tag}`, or set push-commit: false (on the command line: "
            "leave out --push-commit) to commit and tag locally only.",
        )
    if committed.committed and branch is None:
        return warn(
            "skipped",
            "HEAD is detached and no branch was named (GITHUB_REF_NAME, GITHUB_HEAD_REF)",
            f"Check out the branch (actions/checkout does, on push events), or push them with "
            f"`git push {target.remote} HEAD:refs/heads/<branch> refs/tags/{tag}`.",
        )
    if branch is not None and _git(root, "check-ref-format", "--branch", branch).returncode != 0:
        return warn(
            "skipped",
            f"{branch!r} is not a branch name",
            f"Push them with `git push {target.remote} HEAD:refs/heads/<branch> refs/tags/{tag}`.",
        )
    fix = (
        f"Give the workflow a token that may push to {branch or 'the repository'} (permissions: contents: write, "
        "or a deploy key), or set commit: false (on the command line: leave out --push-commit): the registry "
        "keeps the record of released versions."
    )
    atomic = True
    try:
        result = _push(root, target.remote, refs, atomic)
        if result.returncode != 0 and _NO_ATOMIC in result.stderr:
            atomic = False  # an old server: the refs go one by one
            result = _push(root, target.remote, refs, atomic)
    except subprocess.TimeoutExpired:
        return warn("refused", f"{target.remote} did not answer within {TIMEOUT} s", fix, atomic)
    if result.returncode != 0:
        reason = _reason(result)
        if _tag_exists(result, tag):  # no token or setting mends this: the tag on origin must go or move
            again = " ".join(refs)
            moved = f"`git push --force {target.remote} {committed.commit}:refs/tags/{tag}`"
            if committed.committed and branch:
                moved += f" and push the branch with `git push {target.remote} {committed.commit}:refs/heads/{branch}`"
            return warn(
                "refused",
                reason,
                f"The tag {tag} already exists on {target.remote}, on another commit: delete it there with "
                f"`git push {target.remote} :refs/tags/{tag}` and push again with `git push {target.remote} "
                f"{again}`, or move it to this release's commit with {moved}. The registry keeps the record of "
                "released versions either way.",
                atomic,
            )
        if branch and f"{branch} [rejected]" in reason:  # fetch first, non-fast-forward: it moved on meanwhile
            reason += (
                f" ({branch} moved on while the release ran; the next release reads {committed.version or tag} "
                "from the registry all the same)"
            )
        return warn("refused", reason, fix, atomic)
    return PushedBack("pushed", target.remote, branch, tag, tuple(refs), atomic=atomic)
