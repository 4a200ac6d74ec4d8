"""`push`: push a tested image under X.Y.Z, then move the other tags."""

from triton_release import steps
from triton_release.cli.common import Context, setting
from triton_release.history.releases import check_channel, parse_version

HELP = "push the image under X.Y.Z, then move the other tags"


def add_arguments(parser) -> None:
    parser.add_argument("--image", metavar="IMAGE", required=True, help="the tested local image")
    setting(parser, "--to", "repository", metavar="REPO")
    parser.add_argument("--version", metavar="X.Y.Z", required=True, help="the immutable release tag")
    parser.add_argument("--revision", "--commit", dest="revision", metavar="SHA",
                        help="the released commit (adds the sha-<12 hex> tag); --commit is its old name")
    setting(parser, "--channel", "channel", metavar="TAG")
    setting(parser, "--keep", "keep", metavar="N")


def run(ctx: Context, session) -> None:
    parse_version(ctx.args.version)  # every argument checked before anything moves
    check_channel(ctx.settings.channel)
    registry = ctx.registry("--to")
    settings = ctx.settings
    session.step("push", ctx.console.pushed, steps.push, ctx.args.image, registry, ctx.args.version,
                 ctx.args.revision, settings.channel)
    if settings.keep is not None:
        session.step("retain", ctx.console.retained, steps.retain, registry, settings.keep, settings.channel)
