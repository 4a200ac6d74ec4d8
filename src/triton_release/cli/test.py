"""`test`: serve an image, load the models, run their golden cases."""

from triton_release import steps
from triton_release.cli.common import Context, models_list, setting
from triton_release.models.repository import Repository

HELP = "serve the image and run the golden cases"


def add_arguments(parser) -> None:
    parser.add_argument("--image", metavar="IMAGE", required=True, help="the local image to serve")
    parser.add_argument("--models", metavar="A,B", help="the models to test (default: all)")
    setting(parser, "--load-timeout", "load_timeout", metavar="SECONDS")
    setting(parser, "--max-loaded", "max_loaded", metavar="N")
    setting(parser, "--gpus", "gpus", metavar="all|N|IDS")
    setting(parser, "--gpu-models", "gpu_models", choices=("test", "require"))
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="only the golden cases matching this pytest -k expression")
    parser.add_argument("--junitxml", metavar="FILE", help="also write the golden results as JUnit XML")


def run(ctx: Context, session) -> None:
    repo = Repository.load(ctx.model_repository)
    names = models_list(ctx.args.models) or sorted(repo.models)
    session.step("test", ctx.console.golden_run, steps.test, repo, ctx.args.image, names, ctx.settings.load_timeout,
                 junitxml=ctx.args.junitxml, keyword=ctx.args.keyword, memory=ctx.settings.server_memory,
                 pids=ctx.settings.server_pids, max_loaded=ctx.settings.max_loaded, gpus=ctx.settings.gpus,
                 gpu_models=ctx.settings.gpu_models)
