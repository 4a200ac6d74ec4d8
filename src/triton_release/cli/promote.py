"""`promote`: a staged candidate becomes release X.Y.Z once every shard's golden record passed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import requests
from triton_release.cli.common import Context, add_registry_settings, add_signing, setting
from triton_release.fanout.promote import run_promote

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "tag a staged candidate X.Y.Z once every shard's golden record passed, then move the other tags"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--candidate",
        metavar="REPO@sha256:...",
        required=True,
        help="the staged candidate (the stage's `candidate` output)",
    )
    parser.add_argument(
        "--version",
        metavar="X.Y.Z",
        required=True,
        help="the release version: the candidate's planned one (the stage's `version` output)",
    )
    setting(parser, "--channel", "channel", metavar="TAG")
    setting(parser, "--tags", "tags", choices=("all", "version"))
    add_registry_settings(parser)
    parser.add_argument(
        "--commit",
        action="store_true",
        help="redo the candidate's bump in the working tree, commit it as `release X.Y.Z` and tag vX.Y.Z",
    )
    add_signing(parser)
    parser.add_argument(
        "--keep-candidates",
        type=int,
        default=0,
        metavar="N",
        help="keep the newest N candidates older than the release (default 0: delete them all)",
    )


def run(ctx: Context, session: Session) -> None:
    args = ctx.args
    request = requests.promote_request(
        ctx.settings,
        candidate=args.candidate,
        version=args.version,
        commit=args.commit,
        env=ctx.env,
        keep_candidates=args.keep_candidates,
    )
    run_promote(request, session)
