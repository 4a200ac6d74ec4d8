"""`validate`: static checks of the model repository; needs no Docker."""

from triton_release import steps
from triton_release.cli.common import Context

HELP = "static checks of the model repository; needs no Docker"


def add_arguments(parser) -> None:
    pass


def run(ctx: Context, session) -> None:
    session.step(
        "validate",
        ctx.console.validation,
        steps.validate,
        ctx.model_repository,
        requirements_options=ctx.settings.requirements_options,
    )
