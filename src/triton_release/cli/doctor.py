"""`doctor`: whether a release can run here, checked before anything is built, each problem with
its fix (steps/doctor.py). Exit 0 when a release can run, 1 when it cannot."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from triton_release import steps
from triton_release.cli.common import (
    Context,
    add_image_settings,
    add_latency_settings,
    add_registry_settings,
    setting,
)

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = (
    "check, before a release, that it can run here: the daemon, its disk, the base image, the registry, perf_analyzer"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    setting(parser, "--to", "repository", metavar="REPO")
    setting(parser, "--keep", "keep", metavar="N")
    add_image_settings(parser)
    add_latency_settings(parser)
    add_registry_settings(parser)


def run(ctx: Context, session: Session) -> None:
    root = Path(ctx.settings.model_repository)  # its size counts in the disk needed, when it is there
    registry = ctx.repository("--to", required=False)
    session.step(
        "doctor",
        ctx.console.diagnosis,
        steps.doctor,
        ctx.settings,
        ctx.env,
        registry,
        model_root=root if root.is_dir() else None,
    )
