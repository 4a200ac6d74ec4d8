"""`record`: fill in the expected outputs of golden cases that have none."""

from triton_release import steps
from triton_release.cli.common import Context, models_list, setting

HELP = "fill in the expected outputs of golden cases that have none"


def add_arguments(parser) -> None:
    parser.add_argument("--image", metavar="IMAGE", required=True, help="the local image to serve")
    parser.add_argument("--models", metavar="A,B", required=True, help="the models whose cases to fill in")
    parser.add_argument("--overwrite", action="store_true", help="also replace outputs that are already there")
    setting(parser, "--load-timeout", "load_timeout", metavar="SECONDS")
    setting(parser, "--max-loaded", "max_loaded", metavar="N")
    setting(parser, "--gpus", "gpus", metavar="all|N|IDS")


def run(ctx: Context, session) -> None:
    session.step("record", ctx.console.recorded, steps.record, ctx.model_repository, ctx.args.image,
                 models_list(ctx.args.models), ctx.settings.load_timeout, overwrite=ctx.args.overwrite,
                 memory=ctx.settings.server_memory, pids=ctx.settings.server_pids,
                 max_loaded=ctx.settings.max_loaded, gpus=ctx.settings.gpus)
