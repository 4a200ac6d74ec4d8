"""`record`: fill in the expected outputs of golden cases that have none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import steps
from triton_release.cli.common import Context, add_server_settings, models_list

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "fill in the expected outputs of golden cases that have none"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", metavar="IMAGE", required=True, help="the local image to serve")
    parser.add_argument("--models", metavar="A,B", required=True, help="the models whose cases to fill in")
    parser.add_argument("--overwrite", action="store_true", help="also replace outputs that are already there")
    add_server_settings(parser, gpu_models=False)  # a model that cannot load is refused: nothing to record


def run(ctx: Context, session: Session) -> None:
    session.step(
        "record",
        ctx.console.recorded,
        steps.record,
        ctx.model_repository,
        ctx.args.image,
        models_list(ctx.args.models),
        server_options=ctx.settings.server,
        overwrite=ctx.args.overwrite,
    )
