"""`test`: serve an image, load the models, run their golden cases."""

from triton_release import steps
from triton_release.cli.common import SETTING_DEST, Context, add_latency_settings, models_list, setting
from triton_release.errors import UsageError
from triton_release.models.repository import Repository

HELP = "serve the image and run the golden cases"


def add_arguments(parser) -> None:
    parser.add_argument("--image", metavar="IMAGE", required=True,
                        help="the local image to serve, or a staged candidate REPO@sha256:... (pulled by digest)")
    parser.add_argument("--shard", metavar="NAME",
                        help="with a candidate: test this shard of its plan and record the outcome in the registry")
    parser.add_argument("--models", metavar="A,B", help="the models to test (default: all)")
    setting(parser, "--load-timeout", "load_timeout", metavar="SECONDS")
    setting(parser, "--max-loaded", "max_loaded", metavar="N")
    setting(parser, "--gpus", "gpus", metavar="all|N|IDS")
    setting(parser, "--gpu-models", "gpu_models", choices=("test", "require"))
    setting(parser, "--max-drift", "max_drift", metavar="FRACTION")
    add_latency_settings(parser)
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="only the golden cases matching this pytest -k expression")
    parser.add_argument("--junitxml", metavar="FILE", help="also write the golden results as JUnit XML")


def run(ctx: Context, session) -> None:
    from triton_release.registry.candidate import parse_candidate

    if parse_candidate(ctx.args.image) is not None:
        serve_candidate(ctx, session)
        return
    if ctx.args.shard is not None:
        raise UsageError("--shard tests a staged candidate: give --image REPO@sha256:... (the stage's `candidate` "
                         "output).")
    if getattr(ctx.args, SETTING_DEST + "max_drift", None) is not None:
        raise UsageError("--max-drift bounds how far a new version drifts from its previous one, and only a staged "
                         "candidate says which versions are new: give --image REPO@sha256:..., or use `release`.")
    if getattr(ctx.args, SETTING_DEST + "max_latency_increase", None) is not None:
        raise UsageError("--max-latency-increase bounds how much slower a new version is than its previous one, and "
                         "only a staged candidate says which versions are new: give --image REPO@sha256:..., or use "
                         "`release`.")
    repo = Repository.load(ctx.model_repository)
    names = models_list(ctx.args.models) or sorted(repo.models)
    session.step("test", ctx.console.golden_run, steps.test, repo, ctx.args.image, names, ctx.settings.load_timeout,
                 junitxml=ctx.args.junitxml, keyword=ctx.args.keyword, memory=ctx.settings.server_memory,
                 pids=ctx.settings.server_pids, max_loaded=ctx.settings.max_loaded, gpus=ctx.settings.gpus,
                 gpu_models=ctx.settings.gpu_models)


def serve_candidate(ctx: Context, session) -> None:
    """A staged candidate, pulled by digest; with --shard, its record written to the registry."""
    from triton_release.fanout.stage import CandidateTestRequest, run_candidate_test
    from triton_release.models.latency import LatencyOptions
    from triton_release.registry.candidate import parse_candidate
    from triton_release.registry.client import open_repository

    args, settings = ctx.args, ctx.settings
    candidate = parse_candidate(args.image)
    assert candidate is not None
    where, digest = candidate
    request = CandidateTestRequest(
        model_repository=ctx.model_repository, repository=open_repository(where, ctx.env), digest=digest,
        shard=args.shard, models=tuple(models_list(args.models)), junitxml=args.junitxml, keyword=args.keyword,
        load_timeout=settings.load_timeout, memory=settings.server_memory, pids=settings.server_pids,
        max_loaded=settings.max_loaded, gpus=settings.gpus, gpu_models=settings.gpu_models,
        max_drift=settings.max_drift, latency=LatencyOptions.from_settings(settings, ctx.env))
    run_candidate_test(request, session)
