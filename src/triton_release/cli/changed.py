"""`changed`: the models changed between two commits, and the kind of release they make."""

from triton_release import steps
from triton_release.cli.common import Context, add_refs

HELP = "the models changed between two commits"
add_arguments = add_refs


def run(ctx: Context, session) -> None:
    session.step("changed", ctx.console.changes, steps.changes, ctx.model_repository, ctx.args.base, ctx.args.head)
