"""Commands -> release steps. The only place that prints an error and exits."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from triton_release import __version__
from triton_release.action import main as github
from triton_release import settings as settings_mod
from triton_release.console import Console
from triton_release.errors import Refused, TritonReleaseError, UsageError
from triton_release.history.changes import ChangeSet, Changes
from triton_release.history.git import Git
from triton_release.image.build import docker_client
from triton_release.release import ReleaseRequest, run_release
from triton_release.registry.publish import push, rollback, rollback_model
from triton_release.registry.client import RegistryRepository, find_credentials
from triton_release.steps import build_step, golden_step, record_step, verify_release
from triton_release.models.repository import Problem, Repository
from triton_release.models.validate import validate
from triton_release.history.versioning import apply_bumps, plan_bumps, release_kind


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, settings_mod.Settings, Console], dict]


def model_repository(settings: settings_mod.Settings) -> Path:
    root = Path(settings.model_repository)
    if not root.is_dir():
        raise UsageError(f"""
            {root}: no such model repository. Give the folder holding your models with
            --model-repository DIR, or model_repository: in {settings_mod.CONFIG_FILE}.""")
    return root


# -- validate ---------------------------------------------------------------------------------

def run_validate(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    result = validate(model_repository(settings))
    for warning in result.warnings:
        console.problem(warning, "warning")
    report = result.to_json()
    if not result.ok:
        for problem in result.problems:
            console.problem(problem)
        count = len(result.problems)
        raise Refused(f"""
            {result.root}: {count} problem{'s' if count > 1 else ''} found in {len(result.models)} models
            (listed above as file:line:col). Fix them and run `triton-release validate` again.""",
                      report=report)
    console.line(f"{result.root}: {len(result.models)} models, {result.golden_cases} golden cases, no problems")
    return report


# -- changed, bump -----------------------------------------------------------------------------

def add_refs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", metavar="REF", help="the commit released last (all zeros or absent: a first release)")
    p.add_argument("--head", metavar="REF", default="HEAD", help="the commit to release (default HEAD)")


def detect(args: argparse.Namespace, settings: settings_mod.Settings) -> ChangeSet:
    return Changes(model_repository(settings)).between(args.base, args.head)


def run_changed(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    found = detect(args, settings)
    bumps = plan_bumps(found)
    kind = release_kind(found, bumps)
    for name, change in sorted(found.models.items()):
        console.line(f"{name}: {change.status}; {'; '.join(change.reasons)}")
    for name in found.ensembles:
        console.line(f"{name}: ensemble using a changed model; tested, not bumped")
    if not found.models:
        console.line("no model changed")
    console.line(f"release: {kind.kind or 'none'} ({'; '.join(kind.reasons)})")
    return {"changes": found.to_json(), "bumps": [b.to_json() for b in bumps], "release": kind.to_json()}


def run_bump(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    found = detect(args, settings)
    bumps = plan_bumps(found)
    apply_bumps(found, bumps, model_repository(settings))
    for bump in bumps:
        console.line(f"{found.prefix}/{bump.model}/{bump.to_version}: new version folder with the head contents; "
                     f"version {bump.from_version} restored to its released contents")
    if not bumps:
        console.line("no version folder to bump")
    return {"changes": found.to_json(), "bumps": [b.to_json() for b in bumps]}


# -- build, test ---------------------------------------------------------------------------------

def add_build(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tag", metavar="IMAGE", required=True, help="the image to build, e.g. models:candidate")
    p.add_argument("--base-image", metavar="IMAGE", help="the Triton image to build FROM")
    p.add_argument("--python", metavar="X.Y", help="the Python the models run on (default: the base's python3)")
    p.add_argument("--stub", metavar="PROVIDER", help="auto (default), stock, wheel, source or path:FILE")


def provenance(root: Path) -> dict[str, str]:
    """The commit and the source repository, for the image's OCI labels, where they are known."""
    result = Git(root).run("rev-parse", "HEAD", check=False)
    revision = result.stdout.decode().strip() if result.returncode == 0 else ""
    server, name = os.environ.get("GITHUB_SERVER_URL", ""), os.environ.get("GITHUB_REPOSITORY", "")
    return {"revision": revision, "source": f"{server}/{name}" if server and name else ""}


def run_build(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    root = model_repository(settings)
    repo = Repository.load(root)
    result = build_step(repo, settings.base_image, args.tag, python=settings.python, stub_mode=settings.stub,
                        **provenance(root))
    for warning in result.warnings:
        console.warning(warning)
    console.line(result.summary())
    return {"build": result.to_json()}


def add_test(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image", metavar="IMAGE", required=True, help="the built image to serve")
    p.add_argument("--models", metavar="A,B", help="the models to test (default: all)")
    p.add_argument("--load-timeout", type=int, metavar="SECONDS", help="per-model readiness limit (default 300)")
    p.add_argument("-k", dest="keyword", metavar="EXPR", help="only the golden cases matching this pytest -k expression")
    p.add_argument("--junitxml", metavar="FILE", help="also write the golden results as JUnit XML")


def run_test(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    repo = Repository.load(model_repository(settings))
    names = [n for n in (args.models or "").split(",") if n] or sorted(repo.models)
    result = golden_step(repo, args.image, names, settings.load_timeout, junitxml=args.junitxml, keyword=args.keyword)
    for case in result.cases:
        console.line(f"{'PASS' if case.passed else 'FAIL'} {case.case} ({case.latency_ms:.1f} ms)"
                     + (f": {case.message}" if case.message else ""))
    for name in result.untested:
        console.line(f"warning: {name} has no golden cases; it loaded, nothing more is proven")
    report = {"test": result.to_json()}
    failed = [c for c in result.cases if not c.passed]
    for case in failed:
        console.problem(Problem(Path(case.path), case.message))
    if failed:
        raise Refused(f"""
            {len(failed)} of {len(result.cases)} golden cases failed in {args.image} (first:
            {failed[0].path}: {failed[0].message}). Fix the model or, if the new answer is right, the
            golden file.""", report=report)
    console.line(f"{len(result.cases)} golden cases passed in {args.image}")
    return report


def add_record(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image", metavar="IMAGE", required=True, help="the built image to serve")
    p.add_argument("--models", metavar="A,B", required=True, help="the models whose cases to fill in")
    p.add_argument("--overwrite", action="store_true", help="also replace outputs that are already there")
    p.add_argument("--load-timeout", type=int, metavar="SECONDS", help="per-model readiness limit (default 300)")


def run_record(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    repo = Repository.load(model_repository(settings))
    names = [n for n in args.models.split(",") if n]
    written = record_step(repo, args.image, names, settings.load_timeout, overwrite=args.overwrite)
    for path in written:
        console.line(f"{path}: outputs recorded from {args.image}; review them before you commit")
    if not written:
        console.line("every case already has outputs (use --overwrite to record them again)")
    return {"record": {"image": args.image, "written": written}}


# -- push, release, rollback ------------------------------------------------------------------

def registry_repository(ref: str | None, flag: str) -> RegistryRepository:
    if not ref:
        raise UsageError(f"{flag} REPO is required (or image: in {settings_mod.CONFIG_FILE}), e.g. ghcr.io/org/models.")
    host = RegistryRepository.parse(ref).host
    credentials = find_credentials(host, os.environ.get("INPUT_USERNAME"), os.environ.get("INPUT_PASSWORD"))
    return RegistryRepository.parse(ref, credentials)


def add_push(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image", metavar="IMAGE", required=True, help="the tested local image")
    p.add_argument("--to", metavar="REPO", help="the registry repository, e.g. ghcr.io/org/models")
    p.add_argument("--version", metavar="X.Y.Z", required=True, help="the immutable release tag")
    p.add_argument("--commit", metavar="SHA", help="the released commit (adds the sha-<12 hex> tag)")
    p.add_argument("--channel", metavar="TAG", help="the moving tag consumers follow (default latest)")
    p.add_argument("--keep", type=int, metavar="N", help="keep only the newest N releases")


def run_push(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    repo = registry_repository(args.to or settings.image, "--to")
    pushed = push(docker_client(), args.image, repo, args.version, args.commit, settings.channel, settings.keep)
    console.line(f"pushed {repo}:{args.version} ({pushed.digest}); tags {', '.join(pushed.tags)}; "
                 f"{pushed.layers_uploaded} layers uploaded, {pushed.layers_mounted + pushed.layers_present} already in the registry")
    for version in pushed.deleted:
        console.line(f"deleted {repo}:{version} (--keep {settings.keep})")
    return {"push": pushed.to_json(), "version": args.version, "image": f"{repo}:{args.version}",
            "digest": pushed.digest}


def add_release(p: argparse.ArgumentParser) -> None:
    add_refs(p)
    p.add_argument("--to", metavar="REPO", help="the registry repository, e.g. ghcr.io/org/models")
    p.add_argument("--no-push", action="store_true", help="stop after the tests (pull requests, forks)")
    p.add_argument("--commit", action="store_true", help="commit the new version folders as `release X.Y.Z` "
                                                         "and tag vX.Y.Z")
    p.add_argument("--base-image", metavar="IMAGE", help="the Triton image to build FROM")
    p.add_argument("--python", metavar="X.Y", help="the Python the models run on (default: the base's python3)")
    p.add_argument("--stub", metavar="PROVIDER", help="auto (default), stock, wheel, source or path:FILE")
    p.add_argument("--load-timeout", type=int, metavar="SECONDS", help="per-model readiness limit (default 300)")
    p.add_argument("--channel", metavar="TAG", help="the moving tag consumers follow (default latest)")
    p.add_argument("--keep", type=int, metavar="N", help="keep only the newest N releases")


def run_release_command(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    request = ReleaseRequest(
        model_repository=model_repository(settings),
        repo=registry_repository(args.to or settings.image, "--to") if (args.to or settings.image or not args.no_push)
        else None,
        base=args.base, head=args.head, base_image=settings.base_image, python=settings.python,
        stub=settings.stub, load_timeout=settings.load_timeout, channel=settings.channel, keep=settings.keep,
        push=not args.no_push, commit=args.commit)
    report: dict = {}
    try:
        return run_release(request, console, report)
    except TritonReleaseError as exc:
        exc.report = {**report, **exc.report}
        raise


def add_rollback(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", metavar="REPO", help="the registry repository, e.g. ghcr.io/org/models")
    p.add_argument("--to-version", metavar="X.Y.Z", help="the release the channel should point at")
    p.add_argument("--channel", metavar="TAG", help="the tag to move (default latest)")
    p.add_argument("--verify", action="store_true", help="run that release's golden cases against its image first")
    p.add_argument("--server", metavar="URL", help="model-level rollback: a running tritonserver (explicit mode)")
    p.add_argument("--model", metavar="NAME", help="model-level rollback: the model")
    p.add_argument("--to-model-version", type=int, metavar="N", help="model-level rollback: the version to serve")
    p.add_argument("--load-timeout", type=int, metavar="SECONDS", help="with --verify: per-model readiness limit")


def run_rollback(args: argparse.Namespace, settings: settings_mod.Settings, console: Console) -> dict:
    if args.server or args.model or args.to_model_version:
        if not (args.server and args.model and args.to_model_version):
            raise UsageError("model-level rollback needs --server URL, --model NAME and --to-model-version N.")
        done = rollback_model(args.server, args.model, args.to_model_version)
        console.line(f"{args.server}: {args.model} now serves version {args.to_model_version} only")
        return {"rollback": done}
    if not args.to_version:
        raise UsageError("rollback needs --to-version X.Y.Z (or --server, --model and --to-model-version).")
    repo = registry_repository(args.repo or settings.image, "--repo")
    verify = None
    if args.verify:
        def verify(image: str) -> dict:
            run = verify_release(image, model_repository(settings), settings.load_timeout, repo.credentials)
            for case in run.cases:
                console.line(f"{'PASS' if case.passed else 'FAIL'} {case.case}")
            if not run.passed:
                raise Refused(f"{image} fails its own golden cases; the channel was not moved.",
                              report={"test": run.to_json()})
            return run.to_json()
    done = rollback(repo, args.to_version, settings.channel, verify)
    console.line(f"{repo}:{done.channel} -> {done.version} ({done.digest}); it pointed at "
                 f"{done.previous_digest or 'nothing'} before (roll forward with that digest)")
    return {"rollback": done.to_json(), "version": done.version, "image": f"{repo}:{done.version}",
            "digest": done.digest}


COMMANDS: dict[str, Command] = {
    "validate": Command("static checks of the model repository; needs no Docker", lambda p: None, run_validate),
    "changed": Command("the models changed between two commits", add_refs, run_changed),
    "bump": Command("create the next version folders in the working tree", add_refs, run_bump),
    "build": Command("build the release image", add_build, run_build),
    "test": Command("serve the image and run the golden cases", add_test, run_test),
    "record": Command("fill in the expected outputs of golden cases that have none", add_record, run_record),
    "push": Command("push the image under X.Y.Z, then move the other tags", add_push, run_push),
    "release": Command("validate, changed, bump, build, test and push in one run", add_release, run_release_command),
    "rollback": Command("point a channel back at an earlier release", add_rollback, run_rollback),
}


# -- main -------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", help=f"settings file (default: {settings_mod.CONFIG_FILE} where present)")
    common.add_argument("--model-repository", metavar="DIR", help="the model repository (default: model_repository)")
    common.add_argument("--report", metavar="FILE", help="write the JSON report there")
    common.add_argument("--json", action="store_true", help="the JSON report on stdout; human lines on stderr")
    common.add_argument("--debug", action="store_true", help="show a traceback on failure")
    top = argparse.ArgumentParser(prog="triton-release", description="Release NVIDIA Triton Python-backend models.")
    top.add_argument("--version", action="version", version=f"triton-release {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        command.add_arguments(sub.add_parser(name, help=command.help, parents=[common], description=command.help))
    return top


def cli_settings(args: argparse.Namespace) -> dict:
    return {key: getattr(args, key, None) for key in settings_mod.BY_KEY}


def write_report(args: argparse.Namespace, report: dict) -> None:
    text = json.dumps(report, indent=2, sort_keys=False)
    if args.report:
        Path(args.report).write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["action"]:  # the GitHub Action's entry: inputs from INPUT_* variables
        return github.run(main)
    args = parser().parse_args(argv)
    console = Console(json_mode=args.json)
    report: dict = {"command": args.command, "ok": False}
    try:
        settings = settings_mod.resolve(cli_settings(args), args.config)
        report.update(COMMANDS[args.command].run(args, settings, console))
        report["ok"] = True
        code = 0
    except TritonReleaseError as exc:
        report.update(exc.report)
        report["ok"] = False
        report["error"] = {"exit_code": exc.exit_code, "message": exc.message}
        for line in exc.details:
            console.line(line)
        console.failure(exc.message)
        if args.debug:
            traceback.print_exc()
        code = exc.exit_code
    except KeyboardInterrupt:
        console.failure("interrupted")
        return 130
    write_report(args, report)
    return code


if __name__ == "__main__":
    sys.exit(main())
