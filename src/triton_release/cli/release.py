"""`release`: validate, changed, bump, build, test and push in one run."""

from triton_release import release
from triton_release.cli.common import (
    SINCE_LAST_RELEASE,
    Context,
    add_image_settings,
    add_latency_settings,
    add_refs,
    add_server_settings,
    add_signing,
    setting,
    signing,
)
from triton_release.errors import UsageError
from triton_release.history.push_back import PushTarget

HELP = "validate, changed, bump, build, test and push in one run"


def add_arguments(parser) -> None:
    add_refs(parser, SINCE_LAST_RELEASE)
    setting(parser, "--to", "repository", metavar="REPO")
    parser.add_argument("--no-push", action="store_true", help="stop after the tests (pull requests, forks)")
    parser.add_argument(
        "--commit", action="store_true", help="commit the new version folders as `release X.Y.Z` and tag vX.Y.Z"
    )
    setting(parser, "--push-commit", "push_commit", action="store_const", const=True)
    add_image_settings(parser)
    add_server_settings(parser)
    setting(parser, "--channel", "channel", metavar="TAG")
    setting(parser, "--keep", "keep", metavar="N")
    setting(parser, "--max-layers", "max_layers", metavar="N")
    setting(parser, "--max-drift", "max_drift", metavar="FRACTION")
    add_latency_settings(parser)
    setting(parser, "--warmup", "warmup", choices=("off", "golden"))
    add_signing(parser)


def run(ctx: Context, session) -> None:
    from triton_release.models.gates import GateOptions

    args, settings = ctx.args, ctx.settings
    if settings.push_commit and not args.commit and settings.sources.get("push_commit") == "command line":
        raise UsageError("--push-commit pushes the release commit that --commit makes: give --commit too.")
    signed_by, invocation = signing(ctx) if not args.no_push else (None, None)
    request = release.ReleaseRequest(
        model_repository=ctx.model_repository,
        repository=ctx.repository("--to REPO", required=not args.no_push),
        base=args.base,
        head=args.head,
        image=settings.image,
        publish=settings.publish,
        push=not args.no_push,
        commit=args.commit,
        server=settings.server,
        gates=GateOptions.from_settings(settings, ctx.env),
        source=release.provenance_source(ctx.env),
        push_target=PushTarget.from_env(ctx.env),
        signing=signed_by,
        invocation=invocation,
    )
    release.run_release(request, session)
