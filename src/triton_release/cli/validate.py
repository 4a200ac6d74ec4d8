"""`validate`: static checks of the model repository; needs no Docker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_release import steps
from triton_release.cli.common import Context

if TYPE_CHECKING:
    import argparse

    from triton_release.session import Session

HELP = "static checks of the model repository; needs no Docker"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(ctx: Context, session: Session) -> None:
    session.step(
        "validate",
        ctx.console.validation,
        steps.validate,
        ctx.model_repository,
        requirements_options=ctx.settings.requirements_options,
        custom_backends=ctx.settings.custom_backends,
    )
