"""`verify`: check the evidence attached to a release: its envelopes verify with the key, every
Statement is about the image's digest, its golden results say every tested case passed, and its
SBOM and provenance are there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import requests, steps
from triton_release.cli.common import Context, add_registry_settings, setting
from triton_release.errors import UsageError

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "check a release's evidence (signatures, subject, golden results, SBOM, provenance) with a public key"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reference", metavar="REPO:TAG|REPO@DIGEST", help="the image whose evidence to check")
    setting(
        parser,
        "--key",
        "verify_key",
        metavar="PUB",
        help="the public key (cosign.pub) the release's evidence must verify with (default: the verify_key setting)",
    )
    add_registry_settings(parser)


def run(ctx: Context, session: Session) -> None:
    from triton_release.evidence.signing import load_public_key
    from triton_release.evidence.verify import parse_reference
    from triton_release.registry.client import open_repository

    if not ctx.settings.verify_key:
        raise UsageError(
            "verify needs --key PUB: the public key (cosign.pub) of the key releases are signed with "
            "(or verify_key: in triton-release.yaml)."
        )
    key = load_public_key(ctx.settings.verify_key)
    repository, tag, digest = parse_reference(ctx.args.reference)
    registry = open_repository(repository, ctx.env, trust=requests.trust(ctx.settings, ctx.env))
    session.step(
        "check-evidence",
        ctx.console.evidence_checked,
        steps.check_evidence,
        registry,
        ctx.args.reference,
        key,
        tag=tag,
        digest=digest,
    )
