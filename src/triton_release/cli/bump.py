"""`bump`: create the next version folders in the working tree."""

from triton_release import steps
from triton_release.cli.common import Context, add_refs

HELP = "create the next version folders in the working tree"
add_arguments = add_refs


def run(ctx: Context, session) -> None:
    root = ctx.model_repository
    planned = session.step("changed", None, steps.changes, root, ctx.args.base, ctx.args.head)
    session.step("bump", ctx.console.bumped, steps.bump, root, planned)
    steps.journal_end(root)  # the bump is the user's now: no later run takes it for a killed one's
