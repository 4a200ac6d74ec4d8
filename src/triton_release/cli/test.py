"""`test`: serve an image, load the models, run their golden cases."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import requests, steps
from triton_release.cli.common import (
    SETTING_DEST,
    Context,
    add_latency_settings,
    add_registry_settings,
    add_server_settings,
    models_list,
    setting,
)
from triton_release.errors import UsageError
from triton_release.models.repository import Repository

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "serve the image and run the golden cases"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--image",
        metavar="IMAGE",
        required=True,
        help="the local image to serve, or a staged candidate REPO@sha256:... (pulled by digest)",
    )
    parser.add_argument(
        "--shard",
        metavar="NAME",
        help="with a candidate: test this shard of its plan and record the outcome in the registry",
    )
    parser.add_argument("--models", metavar="A,B", help="the models to test (default: all)")
    add_registry_settings(parser)
    add_server_settings(parser)
    setting(parser, "--max-drift", "max_drift", metavar="FRACTION")
    add_latency_settings(parser)
    parser.add_argument(
        "-k", dest="keyword", metavar="EXPR", help="only the golden cases matching this pytest -k expression"
    )
    parser.add_argument("--junitxml", metavar="FILE", help="also write the golden results as JUnit XML")


def run(ctx: Context, session: Session) -> None:
    from triton_release.contract import parse_digest_ref

    if parse_digest_ref(ctx.args.image) is not None:
        serve_candidate(ctx, session)
        return
    if ctx.args.shard is not None:
        raise UsageError(
            "--shard tests a staged candidate: give --image REPO@sha256:... (the stage's `candidate` output)."
        )
    if getattr(ctx.args, SETTING_DEST + "max_drift", None) is not None:
        raise UsageError(
            "--max-drift bounds how far a new version drifts from its previous one, and only a staged "
            "candidate says which versions are new: give --image REPO@sha256:..., or use `release`."
        )
    if getattr(ctx.args, SETTING_DEST + "max_latency_increase", None) is not None:
        raise UsageError(
            "--max-latency-increase bounds how much slower a new version is than its previous one, and "
            "only a staged candidate says which versions are new: give --image REPO@sha256:..., or use "
            "`release`."
        )
    repo = Repository.load(ctx.model_repository)
    names = models_list(ctx.args.models) or sorted(repo.models)
    session.step(
        "test",
        ctx.console.golden_run,
        steps.test,
        repo,
        ctx.args.image,
        names,
        server_options=ctx.settings.server,
        junitxml=ctx.args.junitxml,
        keyword=ctx.args.keyword,
    )


def serve_candidate(ctx: Context, session: Session) -> None:
    """A staged candidate, pulled by digest; with --shard, its record written to the registry."""
    from triton_release.fanout.stage import run_candidate_test

    args = ctx.args
    request = requests.candidate_test_request(
        ctx.settings,
        candidate=args.image,
        shard=args.shard,
        models=tuple(models_list(args.models)),
        env=ctx.env,
        junitxml=args.junitxml,
        keyword=args.keyword,
    )
    run_candidate_test(request, session)
