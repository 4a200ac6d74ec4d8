"""`changed`: the models changed between two commits, and the kind of release they make.

Without --base, the change since the last release, found and planned as `release` finds and
plans it: its vX.Y.Z git tag, else the revision label of the registry's newest release (when the
`repository` setting names one), else the newest vX.Y.Z git tag. `changed` only reads, so a
registry it cannot read is a warning, and the last release is then found from git tags alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from triton_release import steps
from triton_release.cli.common import SINCE_LAST_RELEASE, Context, add_refs
from triton_release.console import Console
from triton_release.errors import InfrastructureError, Refused, TritonReleaseError
from triton_release.history.planned import ChangesResult

if TYPE_CHECKING:
    import argparse

    from triton_release.registry.client import RegistryRepository
    from triton_release.session import Session

HELP = "the models changed between two commits (default: since the last release)"
T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_refs(parser, SINCE_LAST_RELEASE)


def run(ctx: Context, session: Session) -> None:
    args = ctx.args
    if args.base is not None:
        session.step("changed", ctx.console.changes, steps.changes, ctx.model_repository, args.base, head=args.head)
        return
    root, repository = ctx.model_repository, ctx.repository("repository: in the settings", required=False)
    session.step("changed", ctx.console.changes, since_last_release, root, args.head, repository, ctx.console)


def since_last_release(root: Path, head: str, repository: RegistryRepository | None, console: Console) -> ChangesResult:
    registry = ReadOrGitTags(repository, console) if repository is not None else None
    return steps.changes(root, None, head=head, registry=registry, plan=True)  # type: ignore[arg-type]


class ReadOrGitTags:
    """A registry repository read for "the last release": its tags read once; the first read it
    cannot make (unreachable, or refused without credentials) is a warning, and from then on it
    answers as a registry without releases, so the last release is found from git tags."""

    def __init__(self, repository: RegistryRepository, console: Console) -> None:
        self.repository, self.console = repository, console
        self.unreadable = False
        self._tags: list[str] | None = None

    def __str__(self) -> str:
        return str(self.repository)

    def __getattr__(self, name: str) -> Any:  # anything else the planning asks of a registry
        return getattr(self.repository, name)

    def tags(self) -> list[str]:
        if self._tags is None:
            self._tags = self._read(self.repository.tags, list[str]())
        return self._tags

    def image_config(self, reference: str) -> dict:
        return self._read(lambda: self.repository.image_config(reference), {})

    def manifest(self, reference: str) -> Any:
        return self._read(lambda: self.repository.manifest(reference), None)

    def _read(self, read: Callable[[], T], instead: T) -> T:
        if self.unreadable:
            return instead
        try:
            return read()
        except (InfrastructureError, Refused) as exc:
            self.unreadable = True
            self.console.warning(_unreadable(self.repository, exc))
            return instead


def _unreadable(repository: RegistryRepository, exc: TritonReleaseError) -> str:
    return (
        f"could not read the releases in {repository}, so the last release is found from git tags alone: {exc.message}"
    )
