"""`push`: push a tested image under X.Y.Z, then move the other tags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release.cli.common import Context, add_registry_settings, setting
from triton_release.history.releases import check_channel, parse_version
from triton_release.registry import publish as registry

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "push the image under X.Y.Z, then move the other tags"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image", metavar="IMAGE", required=True, help="the tested local image")
    setting(parser, "--to", "repository", metavar="REPO")
    add_registry_settings(parser)
    parser.add_argument("--version", metavar="X.Y.Z", required=True, help="the immutable release tag")
    parser.add_argument(
        "--revision",
        "--commit",
        dest="revision",
        metavar="SHA",
        help="the released commit (adds the sha-<12 hex> tag); --commit is its old name",
    )
    setting(parser, "--channel", "channel", metavar="TAG")
    setting(parser, "--tags", "tags", choices=("all", "version"))
    setting(parser, "--keep", "keep", metavar="N")


def run(ctx: Context, session: Session) -> None:
    args, publish, console = ctx.args, ctx.settings.publish, ctx.console
    parse_version(args.version)  # every argument checked before anything moves
    check_channel(publish.channel)
    repository = ctx.repository("--to REPO")
    channel = publish.channel
    pushed = session.step("push", console.pushed, registry.push, args.image, repository, args.version)
    session.step(
        "tags",
        console.tagged,
        registry.tag_release,
        repository,
        args.version,
        args.revision,
        channel,
        pushed.digest,
        tags=publish.tags,
    )
    if publish.keep is not None:
        session.step("retain", console.retained, registry.retain, repository, publish.keep, channel)
