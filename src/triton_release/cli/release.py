"""`release`: validate, changed, bump, build, test and push in one run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import release, requests
from triton_release.cli.common import (
    SINCE_LAST_RELEASE,
    Context,
    add_image_settings,
    add_latency_settings,
    add_refs,
    add_registry_settings,
    add_server_settings,
    add_signing,
    setting,
)
from triton_release.errors import UsageError

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "validate, changed, bump, build, test and push in one run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_refs(parser, SINCE_LAST_RELEASE)
    setting(parser, "--to", "repository", metavar="REPO")
    add_registry_settings(parser)
    parser.add_argument("--no-push", action="store_true", help="stop after the tests (pull requests, forks)")
    parser.add_argument(
        "--commit", action="store_true", help="commit the new version folders as `release X.Y.Z` and tag vX.Y.Z"
    )
    setting(parser, "--push-commit", "push_commit", action="store_const", const=True)
    setting(
        parser,
        "--no-push-commit",
        "push_commit",
        action="store_const",
        const=False,
        help="keep the release commit and its tag on this machine, whatever push_commit: in "
        "triton-release.yaml says (default: the setting's value)",
    )
    setting(parser, "--upload-during-tests", "upload_during_tests", metavar="true|false")
    add_image_settings(parser)
    add_server_settings(parser)
    setting(parser, "--channel", "channel", metavar="TAG")
    setting(parser, "--tags", "tags", choices=("all", "version"))
    setting(parser, "--keep", "keep", metavar="N")
    setting(parser, "--max-layers", "max_layers", metavar="N")
    setting(parser, "--max-drift", "max_drift", metavar="FRACTION")
    add_latency_settings(parser)
    setting(parser, "--warmup", "warmup", choices=("off", "golden"))
    add_signing(parser)
    parser.add_argument(
        "--junitxml", metavar="FILE", help="also write the golden results of the test step as JUnit XML"
    )


def run(ctx: Context, session: Session) -> None:
    args, settings = ctx.args, ctx.settings
    if settings.push_commit and not args.commit and settings.sources.get("push_commit") == "command line":
        raise UsageError("--push-commit pushes the release commit that --commit makes: give --commit too.")
    request = requests.release_request(
        settings,
        base=args.base,
        head=args.head,
        push=not args.no_push,
        commit=args.commit,
        env=ctx.env,
        junitxml=args.junitxml,
    )
    release.run_release(request, session)
