"""The sources a `source` stub is compiled from, and where they come from (the `stub_sources`
setting): python_backend at the server's r<YY.MM> branch, the same branch of Triton's common, core
and backend, pybind11, dlpack and googletest; each from GitHub, or from a folder or URL holding
git mirrors of them named `<name>.git` (an air-gapped team's own mirror).

Each is checked on the host before any build (there, and holding the ref) and fetched there one
commit deep into the builder stage's context: the builder stage never reaches for them itself,
and a missing one is named before anything is built. Boost comes from upstream's URL (the one
python_backend's CMake downloads) by default, and from the build image's own package
(libboost-dev) when mirrors are given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from triton_release.errors import UsageError

GITHUB = "https://github.com"
# name -> (its GitHub repository, the ref: "{branch}" is the server's r<YY.MM>)
UPSTREAM = {
    "python_backend": ("triton-inference-server/python_backend", "{branch}"),
    "common": ("triton-inference-server/common", "{branch}"),
    "core": ("triton-inference-server/core", "{branch}"),
    "backend": ("triton-inference-server/backend", "{branch}"),
    # not python_backend's own pin (2.10 up to r24.10), whose stubs break every answer under numpy 2
    "pybind11": ("pybind/pybind11", "v2.13.6"),
    "dlpack": ("dmlc/dlpack", "v0.8"),  # python_backend r24.10's pin
    "googletest": ("google/googletest", "9406a60c7839052e4944ea4dbc8344762a89f9bd"),  # common r24.10's
}
NAMES = tuple(UPSTREAM)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_URL = re.compile(r"^(https?|ssh|git)://|^[\w.-]+@[\w.-]+:")
GIT_TIMEOUT = 60  # seconds for one ls-remote or fetch


class Unavailable(Exception):
    """A source could not be found where it was looked for. `unreachable`: an infrastructure
    failure (the place did not answer, or a mirror lacks what upstream has), rather than a
    release that has no such source."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass(frozen=True)
class Origin:
    """Where the sources come from: GitHub (`given` empty), a folder of mirrors, or a URL of them."""

    given: str = ""

    @property
    def mirrors(self) -> bool:
        return bool(self.given)

    @property
    def folder(self) -> Path | None:
        """The local folder of mirrors, when `given` names one (a path or a file:// URL)."""
        if not self.given or (_URL.match(self.given) and not self.given.startswith("file://")):
            return None
        return Path(self.given.removeprefix("file://")).absolute()

    @property
    def boost(self) -> str:
        """upstream: python_backend's own download of Boost; system: the build image's libboost-dev."""
        return "system" if self.mirrors else "upstream"

    def url(self, name: str) -> str:
        if not self.given:
            return f"{GITHUB}/{UPSTREAM[name][0]}"
        folder = self.folder
        return f"file://{folder / f'{name}.git'}" if folder else f"{self.given.rstrip('/')}/{name}.git"

    def describe(self) -> str:
        return f"the mirrors in {self.given}" if self.given else "GitHub"


@dataclass(frozen=True)
class Source:
    name: str
    url: str  # where it was found
    ref: str  # a branch, a tag or a commit
    commit: str

    @property
    def branch(self) -> str:
        """The branch the builder's copy names it by: the ref, or `pinned` for a commit."""
        return "pinned" if _COMMIT.match(self.ref) else self.ref

    def to_json(self) -> dict:
        return {"url": self.url, "ref": self.ref, "commit": self.commit}


def wanted(branch: str) -> dict[str, str]:
    """name -> the ref needed for python_backend's `branch`."""
    return {name: ref.format(branch=branch) for name, (_, ref) in UPSTREAM.items()}


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    return subprocess.run(["git", *args], capture_output=True, text=True, timeout=GIT_TIMEOUT, cwd=cwd, env=env)


@contextmanager
def readable(origin: Origin) -> Iterator[Origin]:
    """`origin`, readable by git: a folder's bare repositories that lack the (empty) `refs`
    folder git requires, as copies that drop empty folders leave them, are seen through a view of
    links with one added. Nothing is copied and the folder is never written."""
    folder = origin.folder
    if folder is None or all((folder / f"{name}.git" / "refs").is_dir() for name in NAMES):
        yield origin
        return
    with tempfile.TemporaryDirectory(prefix="triton-release-mirrors-") as scratch:
        view = Path(scratch)
        for name in NAMES:
            repo = folder / f"{name}.git"
            if not repo.is_dir():
                continue
            seen = view / repo.name
            seen.mkdir()
            for entry in repo.iterdir():
                if entry.name == "HEAD":  # git refuses a HEAD that is a link outside refs/
                    shutil.copyfile(entry, seen / "HEAD")
                else:
                    (seen / entry.name).symlink_to(entry)
            (seen / "refs").mkdir(exist_ok=True)
        yield Origin(str(view))


def resolve(origin: Origin, branch: str) -> tuple[Source, ...]:
    """Each source at its ref, with its commit; raises Unavailable naming every missing one and
    where it was looked for, before anything is fetched or built."""
    folder = origin.folder
    if folder is not None:
        if not folder.is_dir():
            raise UsageError(
                f"stub_sources {origin.given}: no such folder. Give the folder (or URL) holding the git "
                f"mirrors {', '.join(f'{n}.git' for n in NAMES)}, or leave stub_sources unset for GitHub."
            )
        missing = [f"{name}.git" for name in NAMES if not (folder / f"{name}.git").is_dir()]
        if missing:
            raise Unavailable(
                f"stub_sources {origin.given} holds no {', '.join(missing)} (a git mirror of "
                + ", ".join(f"{GITHUB}/{UPSTREAM[m.removesuffix('.git')][0]}" for m in missing)
                + ")",
                unreachable=True,
            )
    found = []
    with readable(origin) as seen:
        for name, ref in wanted(branch).items():
            found.append(_resolve(origin, seen, name, ref))
    return tuple(found)


def _resolve(origin: Origin, seen: Origin, name: str, ref: str) -> Source:
    url = seen.url(name)
    shown = origin.url(name)
    try:
        if _COMMIT.match(ref):
            done = _git("ls-remote", url) if seen.folder else None
            if done is not None and done.returncode == 0 and ref not in done.stdout:
                # a mirror's refs need not name the pinned commit: ask for the object itself
                folder = seen.folder
                assert folder is not None
                probe = _git("--git-dir", str(folder / f"{name}.git"), "cat-file", "-e", f"{ref}^{{commit}}")
                if probe.returncode != 0:
                    raise Unavailable(f"{shown} has no commit {ref} ({name}'s pinned commit)", unreachable=True)
        else:
            done = _git("ls-remote", url, f"refs/heads/{ref}", f"refs/tags/{ref}", f"refs/tags/{ref}^{{}}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{shown} did not answer ({exc.__class__.__name__})", unreachable=True) from None
    if done is not None and done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["git failed"])[-1]
        raise Unavailable(f"{shown} could not be read ({why})", unreachable=not origin.folder)
    if _COMMIT.match(ref):
        return Source(name, shown, ref, ref)
    assert done is not None
    refs: dict[str, str] = {}
    for line in done.stdout.splitlines():
        found, tab, refname = line.partition("\t")
        if tab:
            refs[refname] = found
    commit = refs.get(f"refs/tags/{ref}^{{}}") or refs.get(f"refs/tags/{ref}") or refs.get(f"refs/heads/{ref}")
    if not commit:
        raise Unavailable(f"{shown} has no branch or tag {ref}", unreachable=origin.mirrors)
    return Source(name, shown, ref, commit)


def gather(origin: Origin, sources: tuple[Source, ...], into: Path) -> None:
    """Each source's commit, one deep, as a bare repository `into/<name>.git` whose branch
    (`Source.branch`, its HEAD) points at it: what the builder stage clones, and CMake's FetchContent through
    TRITON_REPO_ORGANIZATION=file://<into>."""
    with readable(origin) as seen:
        for source in sources:
            repo = into / f"{source.name}.git"
            _run(source, "init", "--quiet", "--bare", str(repo))
            _run(
                source, "--git-dir", str(repo), "fetch", "--quiet", "--depth", "1", seen.url(source.name), source.commit
            )
            _run(source, "--git-dir", str(repo), "update-ref", f"refs/heads/{source.branch}", source.commit)
            _run(source, "--git-dir", str(repo), "symbolic-ref", "HEAD", f"refs/heads/{source.branch}")


def _run(source: Source, *args: str) -> None:
    try:
        done = _git(*args)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{source.url} did not answer ({exc.__class__.__name__})", unreachable=True) from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["git failed"])[-1]
        raise Unavailable(f"fetching {source.name} {source.ref} ({source.commit[:12]}) from {source.url} failed: {why}")
