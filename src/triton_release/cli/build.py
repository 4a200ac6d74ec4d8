"""`build`: the stub-matched release image."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import steps
from triton_release.cli.common import Context, add_image_settings, setting
from triton_release.requests import provenance_source

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "build the release image"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tag", metavar="IMAGE", required=True, help="the local image to build, e.g. models:candidate")
    add_image_settings(parser)
    setting(parser, "--max-layers", "max_layers", metavar="N")
    setting(parser, "--warmup", "warmup", choices=("off", "golden"))


def run(ctx: Context, session: Session) -> None:
    settings = ctx.settings
    session.step(
        "build",
        ctx.console.built,
        steps.build,
        ctx.model_repository,
        settings.image,
        ctx.args.tag,
        source=provenance_source(ctx.env),
    )
