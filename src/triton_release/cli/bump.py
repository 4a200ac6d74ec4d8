"""`bump`: create the next version folders in the working tree.

Without --base, the change since the last release, found as `changed` and `release` find it
(cli/changed.py: `since_last_release`), so that `bump` writes the folders `release` would."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import steps
from triton_release.cli.changed import since_last_release
from triton_release.cli.common import SINCE_LAST_RELEASE, Context, add_refs
from triton_release.history.journal import Journal

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "create the next version folders in the working tree (default: for the change since the last release)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_refs(parser, SINCE_LAST_RELEASE)


def run(ctx: Context, session: Session) -> None:
    root, args = ctx.model_repository, ctx.args
    if args.base is not None:
        planned = session.step("changed", None, steps.changes, root, args.base, head=args.head)
    else:
        repository = ctx.repository("repository: in the settings", required=False)
        planned = session.step("changed", None, since_last_release, root, args.head, repository, ctx.console)
    session.step("bump", ctx.console.bumped, steps.bump, root, planned)
    Journal.around(root).end()  # the bump is the user's now: no later run takes it for a killed one's
