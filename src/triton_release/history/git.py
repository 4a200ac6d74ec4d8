"""Git as a subprocess with argument lists: refs, trees, blobs, archives. No shell."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from triton_release.errors import InfrastructureError, UsageError


class GitFailed(InfrastructureError):
    """A git command that should have worked did not: the repository or git is broken. Refs the
    user gave that do not resolve are a UsageError instead."""


FETCH_TIMEOUT_S = 600  # fetching a shallow clone's history: a remote that stalls is refused, not waited on

ZERO_SHA = re.compile(r"^0{40}$|^0{64}$")
SAFE_REF = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./@{}~^+-]*$")
# attributes under which a checkout and `git archive` may write other bytes for the same blob
CONVERTING = ("export-ignore", "export-subst", "text", "eol", "ident", "filter", "working-tree-encoding")


# a commit's full id (SHA-1 or SHA-256): what it names never changes
COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


# Every git command the tool runs, whatever the user's config says: git hashes a file over
# core.bigFileThreshold (512 MiB) through the deflate it would store it with (a `git status` of
# 600 MiB of weights whose stat changed: about 17 s at the default level, 2 to 3 s at 0), so nothing is
# deflated; no automatic gc or maintenance, which would repack the weights at that level; and
# packs mapped 16 MiB at a time, 64 MiB at most (a 600 MiB blob read held 619 MB with git's 1 GiB
# windows, 70 MB with these).
GIT_SETTINGS = (
    *("-c", "pack.compression=0"),
    *("-c", "maintenance.auto=false", "-c", "gc.auto=0"),
    *("-c", "core.packedGitWindowSize=16m", "-c", "core.packedGitLimit=64m"),
)


# git's options before its subcommand that take the next argument as their value
_VALUED = {"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"}


def subcommand(args: tuple[str, ...] | list[str]) -> str:
    """The git subcommand of `args` (`commit` of `-c user.name=... commit -q`), past git's own options."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _VALUED else 1
    return args[i] if i < len(args) else " ".join(args)


@dataclass(frozen=True)
class Git:
    cwd: Path

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        check: bool = True,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        try:
            result = subprocess.run(
                ["git", *GIT_SETTINGS, *args], cwd=self.cwd, input=input, capture_output=True, timeout=timeout, env=env
            )
        except FileNotFoundError:
            raise InfrastructureError("git is not installed: install it (apt-get install git).") from None
        except subprocess.TimeoutExpired:
            raise GitFailed(f"git {subcommand(args)} did not finish within {timeout:.0f} s in {self.cwd}") from None
        if check and result.returncode != 0:
            raise GitFailed(
                f"git {subcommand(args)} failed in {self.cwd}: {result.stderr.decode(errors='replace').strip()}"
            )
        return result

    def text(self, *args: str) -> str:
        return self.run(*args).stdout.decode("utf-8", errors="replace").strip()

    def converting(self, paths: list[str]) -> str | None:
        """The first of `paths` (tracked files) for which a checkout and `git archive` may write
        other bytes than its blob, and the attribute that says so, as text; None for none."""
        if not paths:
            return None
        out = self.run(
            "check-attr",
            "-z",
            "--stdin",
            *CONVERTING,
            input="\0".join(paths).encode("utf-8", "surrogateescape") + b"\0",
        ).stdout
        fields = out.split(b"\0")
        for i in range(0, len(fields) - 2, 3):
            if fields[i + 2] not in (b"unspecified", b"unset"):
                return f"the attribute {fields[i + 1].decode()} is set for {fields[i].decode('utf-8', 'replace')}"
        return None

    def toplevel(self) -> Path:
        result = self.run("rev-parse", "--show-toplevel", check=False)
        if result.returncode != 0:
            raise UsageError(
                f"{self.cwd} is not inside a git repository: change detection needs one "
                "(in a workflow, check out with actions/checkout and fetch-depth: 0)."
            )
        return Path(result.stdout.decode().strip())

    def is_shallow(self) -> bool:
        return self.text("rev-parse", "--is-shallow-repository") == "true"

    def remote(self) -> str | None:
        """The remote the checked-out branch follows, else `origin`, else the only one; None: none."""
        upstream = self.run("rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{u}", check=False)
        remotes = self.text("remote").splitlines()
        followed = upstream.stdout.decode().strip().split("/", 1)[0] if upstream.returncode == 0 else ""
        for name in (followed, "origin"):
            if name and name in remotes:
                return name
        return remotes[0] if len(remotes) == 1 else None

    def fetch(self, *args: str) -> str:
        """`git fetch <remote> *args` with the checkout's own credentials (actions/checkout keeps
        the workflow's token in the git config), never asking for others; "" when it worked, else
        why not."""
        remote = self.remote()
        if remote is None:
            return "the checkout has no remote to fetch from"
        try:
            # never asking on a terminal: a run in CI has no one to answer, and a local one must not hang
            prompt = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
            result = self.run("fetch", "--quiet", remote, *args, check=False, timeout=FETCH_TIMEOUT_S, env=prompt)
        except GitFailed as exc:
            return str(exc)
        return "" if result.returncode == 0 else result.stderr.decode(errors="replace").strip()[-400:]

    def commit(self, ref: str, what: str = "ref") -> str | None:
        """The commit id of `ref`; None for GitHub's all-zero 'no previous commit'."""
        if ZERO_SHA.match(ref):
            return None
        if not SAFE_REF.match(ref) or ".." in ref:
            raise UsageError(f"{what} {ref!r} is not a git reference: give a commit id, branch, tag or HEAD~1.")
        result = self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
        if result.returncode == 0:
            return result.stdout.decode().strip()
        if self.is_shallow():
            raise UsageError(f"""
                {what} {ref!r} is not in this shallow clone. Fetch the history: `git fetch --unshallow`,
                or in a workflow check out with `actions/checkout` and `fetch-depth: 0`.""")
        raise UsageError(f"{what} {ref!r} is not a commit in {self.cwd}: check the name (git log --oneline).")

    def has_commit(self, ref: str) -> bool:
        return self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).returncode == 0

    def is_ancestor(self, base: str, head: str) -> bool:
        return self.run("merge-base", "--is-ancestor", base, head, check=False).returncode == 0

    def diff_names(self, base: str, head: str, path: str) -> list[tuple[str, str]]:
        """(status letter, path) of every file that differs under `path`; renames as delete + add."""
        out = self.run("diff", "--name-status", "-z", "--no-renames", base, head, "--", path).stdout
        fields = out.decode("utf-8", errors="surrogateescape").split("\0")
        return [(fields[i][0], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]

    def listed(self, ref: str, path: str) -> dict[str, str]:
        """Every file under `path` at `ref` -> its blob id ("" for a submodule's commit), from one
        `git ls-tree -r`."""
        out = self.run("ls-tree", "-r", "-z", ref, "--", path).stdout
        found: dict[str, str] = {}
        for entry in out.split(b"\0"):
            if entry:
                meta, _, name = entry.partition(b"\t")
                _, kind, oid = meta.split()
                found[name.decode("utf-8", errors="surrogateescape")] = oid.decode() if kind == b"blob" else ""
        return found

    def blob_ids(self, ref: str, paths: list[str]) -> dict[str, str]:
        """The git blob id of each of `paths` that is a file at `ref` (`git rev-parse ref:path`
        gives the same id), from one `git ls-tree`; a path that is not a file there is left out."""
        if not paths:
            return {}
        listed = self.run("--literal-pathspecs", "ls-tree", "-z", ref, "--", *sorted(set(paths))).stdout
        ids: dict[str, str] = {}
        for entry in listed.split(b"\0"):
            if not entry:
                continue
            meta, _, path = entry.partition(b"\t")
            _, kind, oid = meta.split()
            if kind == b"blob":
                ids[path.decode("utf-8", errors="surrogateescape")] = oid.decode()
        return ids

    def blobs(self, ref: str, paths: list[str], listed: Mapping[str, str] | None = None) -> dict[str, bytes | None]:
        """Many files at one commit: their ids from one `git ls-tree` (or `listed`, the `listed` of
        `ref` holding them), their contents through one `git cat-file --batch` (by id, which git
        finds faster than by path). None: not a file there."""
        if not paths:
            return {}
        ids = self.blob_ids(ref, paths) if listed is None else {p: listed[p] for p in paths if listed.get(p)}
        wanted = sorted(set(ids.values()))
        named = {oid: path for path, oid in ids.items()}
        out = b""
        if wanted:
            read = self.run("cat-file", "--batch", input="".join(f"{oid}\n" for oid in wanted).encode(), check=False)
            if read.returncode != 0:  # a partial clone that could not fetch one: git names it
                stderr = read.stderr.decode(errors="replace")
                lacking = next((oid for oid in wanted if oid in stderr), None)
                if lacking is not None:
                    raise self.missing(lacking, named.get(lacking, ""), ref)
                raise GitFailed(f"git cat-file failed in {self.cwd}: {stderr.strip()}")
            out = read.stdout
        contents: dict[str, bytes] = {}
        pos = 0
        for oid in wanted:
            end = out.index(b"\n", pos)
            header = out[pos:end].split()
            if len(header) != 3:  # "<oid> missing"
                raise self.missing(oid, named.get(oid, ""), ref)
            size = int(header[2])
            pos = end + 1
            contents[oid] = out[pos : pos + size]
            pos += size + 1
        return {path: contents[ids[path]] if path in ids else None for path in paths}

    def missing(self, oid: str, path: str = "", ref: str = "") -> InfrastructureError:
        """The error for an object git does not have: in a partial clone (`--filter`), one its
        remote could not give (unreachable, or gone), with the fix; else a damaged repository."""
        where = f"git object {oid[:12]}"
        if path:
            where = f"{path}{f' at {ref[:12]}' if ref else ''} (git object {oid[:12]})"
        promisors = self.run("config", "--get-regexp", r"^remote\..*\.promisor$", check=False).stdout.decode()
        remotes = [
            key[len("remote.") : -len(".promisor")]
            for key, _, value in (line.partition(" ") for line in promisors.splitlines())
            if value.strip().lower() in ("true", "yes", "on", "1")
        ]
        if not remotes:
            return GitFailed(
                f"git has no object {oid} ({where}) in {self.cwd}: the repository is damaged; run git fsck."
            )
        remote = remotes[0]
        return InfrastructureError(f"""
            {where} is not in this partial clone ({self.cwd}, cloned with --filter), and git could not fetch it
            from the clone's remote {remote}: it is unreachable, or no longer has that commit. Make {remote}
            reachable (`git remote set-url {remote} URL` where it moved) and run again, or give the checkout
            every object first (`git fetch --refetch {remote}` with the filter removed: `git config --unset
            remote.{remote}.partialclonefilter`); in a workflow, give actions/checkout no `filter`.""")

    @contextmanager
    def cat_file(
        self, oids: list[str], paths: list[str] | None = None, ref: str = ""
    ) -> Iterator[Iterator[Iterator[bytes]]]:
        """Each of `oids`' bytes in chunks, in order, from one `git cat-file --batch` fed by a
        thread (a large file never sits in memory). Consume each object's chunks before the next.
        `paths` and `ref`: where each object is, for the message when git lacks it."""
        try:
            process = subprocess.Popen(
                ["git", *GIT_SETTINGS, "cat-file", "--batch", "--buffer"],
                cwd=self.cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise InfrastructureError("git is not installed: install it (apt-get install git).") from None
        stdin, stdout = process.stdin, process.stdout
        assert stdin is not None and stdout is not None

        def feed() -> None:
            try:
                stdin.write("".join(f"{oid}\n" for oid in oids).encode())
                stdin.close()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the reader stopped early

        named = dict(zip(oids, paths or ()))

        def chunks(oid: str) -> Iterator[bytes]:
            header = stdout.readline().split()
            if len(header) != 3:  # "<oid> missing"
                raise self.missing(oid, named.get(oid, ""), ref)
            left = int(header[2])
            while left:
                chunk = stdout.read(min(left, 1 << 20))
                if not chunk:
                    raise GitFailed(f"git cat-file stopped while reading {oid} in {self.cwd}")
                left -= len(chunk)
                yield chunk
            stdout.read(1)  # the newline after each object

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            yield (chunks(oid) for oid in oids)
        finally:
            process.kill()
            process.wait()
            writer.join()
            stdout.close()

    def tags(self, pattern: str) -> list[str]:
        return self.text("tag", "--list", pattern).splitlines()
