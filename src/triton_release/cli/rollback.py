"""`rollback`: point a channel back at an earlier release, or a running server at an earlier
version of one model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import release, requests
from triton_release.cli.common import Context, add_registry_settings, add_server_settings, setting
from triton_release.errors import UsageError
from triton_release.registry import rollback as channels

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "point a channel back at an earlier release"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    setting(parser, "--repo", "repository", metavar="REPO")
    add_registry_settings(parser)
    parser.add_argument("--to-version", metavar="X.Y.Z", help="the release the channel should point at")
    setting(parser, "--channel", "channel", metavar="TAG")
    parser.add_argument("--verify", action="store_true", help="run that release's golden cases against its image first")
    parser.add_argument("--server", metavar="URL", help="model-level rollback: a running tritonserver (explicit mode)")
    parser.add_argument("--model", metavar="NAME", help="model-level rollback: the model")
    parser.add_argument("--to-model-version", type=int, metavar="N", help="model-level rollback: the version to serve")
    add_server_settings(parser)
    setting(
        parser,
        "--key",
        "verify_key",
        metavar="PUB",
        help="refuse unless the release's evidence verifies with this public key (cosign.pub); the channel "
        "is not moved otherwise (default: the verify_key setting)",
    )


def run(ctx: Context, session: Session) -> None:
    args, settings = ctx.args, ctx.settings
    if args.server or args.model or args.to_model_version is not None:
        if not (args.server and args.model and args.to_model_version is not None):
            raise UsageError("model-level rollback needs --server URL, --model NAME and --to-model-version N.")
        if args.to_model_version < 1:
            raise UsageError(f"--to-model-version {args.to_model_version}: Triton's versions start at 1.")
        session.step(
            "rollback",
            ctx.console.model_rolled_back,
            channels.rollback_model,
            args.server,
            args.model,
            args.to_model_version,
        )
        return
    if not args.to_version:
        raise UsageError("rollback needs --to-version X.Y.Z (or --server, --model and --to-model-version).")
    request = requests.rollback_request(settings, version=args.to_version, verify=args.verify, env=ctx.env)
    release.run_rollback(request, session)
