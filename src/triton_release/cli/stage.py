"""`stage`: build the release once and push it as a candidate, planned into shards for many runners."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import requests
from triton_release.cli.common import (
    SINCE_LAST_RELEASE,
    Context,
    add_image_settings,
    add_refs,
    add_registry_settings,
    add_signing,
    setting,
)
from triton_release.fanout.stage import run_stage

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "validate, changed, build and push a candidate (candidate-<sha12>, no release tag), planned into shards"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_refs(parser, SINCE_LAST_RELEASE)
    setting(parser, "--to", "repository", metavar="REPO")
    add_registry_settings(parser)
    count = parser.add_mutually_exclusive_group()
    count.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="split the tested models into N shards (default: one per 25 models, at most 8)",
    )
    count.add_argument(
        "--max-models-per-shard", type=int, metavar="N", help="as many shards as hold at most N tested models each"
    )
    add_image_settings(parser)
    setting(parser, "--channel", "channel", metavar="TAG")
    setting(parser, "--max-layers", "max_layers", metavar="N")
    setting(parser, "--warmup", "warmup", choices=("off", "golden"))
    add_signing(parser)


def run(ctx: Context, session: Session) -> None:
    args = ctx.args
    request = requests.stage_request(
        ctx.settings,
        base=args.base,
        head=args.head,
        shards=args.shards,
        max_models=args.max_models_per_shard,
        env=ctx.env,
    )
    run_stage(request, session)
