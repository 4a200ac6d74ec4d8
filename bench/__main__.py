"""`python -m bench` (`make bench`): triton-release against the naive pipeline, in one run.

On a generated repository of N Python models with W bytes of weights per version folder: the
release of a one-model change (time and bytes uploaded), the image rebuild, server readiness
(changed model vs every model), golden throughput, rollback (retag vs pull, tag, push). On
repositories of 20, 200 and 1,000 tiny models: the release of a one-model change against N, and
the first release of each (waves, the server's peak memory, layers). A requirements change beside
a model needing torch. A one-model change with 512 MiB of new weights: its upload beside the
tests, against the daemon's push after them and the naive pipeline (upload_overlap, bench/upload.py).
`validate`/`changed` at 10, 100 and 1000 models. Prints Markdown tables,
writes bench/results.json and bench/results.png. Needs the local stack (`make stack`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

from bench import pipeline, rebuild, report, requirements_change, scale, serve, upload
from bench.generate import generate_history
from bench.revision import revision

KEPT = (
    "fanout",
    "latency",
    "cold_runner",
    "new_weights",
)  # sections of an earlier bench/results.json that this run does not measure
# `--quick`: every part at a tiny size, once, the figures kept out of bench/ (the test suite's smoke
# run: it shows that the benchmark runs, not how fast). A flag given beside it still wins.
QUICK = {
    "models": 2,
    "weights": 4096,
    "scale_sizes": "2",
    "change_weights": 4096,
    "naive_max": 2,
    "skip_requirements": True,
    "upload_weights": 65536,
    "sizes": "3",
    "history": "4,6",
    "repeat": 1,
    "cases": 4,
    "json": ".stack/bench-quick/results.json",
    "plot": ".stack/bench-quick/results.png",
    "allow_dirty": True,
}


def time_command(cmd: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def machine() -> str:
    import platform

    try:
        server = docker.from_env().version().get("Version", "?")
    except docker.errors.DockerException:
        server = "?"
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, Docker {server}"


def spread(values: list[float]) -> float:
    return round(max(values) - min(values), 3) if values else 0.0


def release_comparison(args, results: dict, run_id: str) -> None:
    client = docker.from_env(timeout=600)
    m = pipeline.measure_size(client, args.models, args.weights, args.repeat, run_id)
    ours, naive = (statistics.median(m["times"][k]) for k in ("triton_release", "naive"))
    print(
        f"release of a one-model change, {args.models} models: triton-release {ours:.2f} s, naive {naive:.2f} s",
        flush=True,
    )
    up_ours, up_naive = (statistics.median(m["uploaded"][k]) for k in ("triton_release", "naive"))
    changed = statistics.median(m["changed_version"])
    results["release_s"] = {
        "triton_release": round(ours, 3),
        "naive": round(naive, 3),
        "ratio": round(ours / naive, 3),
        "spread": {"triton_release": spread(m["times"]["triton_release"]), "naive": spread(m["times"]["naive"])},
        # where the time went, step by step (the test step by its phases): medians over the runs
        "steps": {name: pipeline.median_steps(runs) for name, runs in m["steps"].items()},
    }
    results["uploaded_bytes"] = {
        "triton_release": int(up_ours),
        "naive": int(up_naive),
        "changed_version": int(changed),
        "ratio_to_changed": round(up_ours / changed, 3) if changed else None,
    }
    results["rollback_s"] = pipeline.rollback_figures(
        client, m["ours_repo"], m["naive_repo"], m["first_version"], "r0", args.repeat
    )
    pipeline.remove_images(client, m["ours_repo"], m["naive_repo"])


def scaling(args, results: dict, run_id: str) -> None:
    client = docker.from_env(timeout=600)
    sizes = [int(s) for s in args.scale_sizes.split(",")]
    figures = scale.measure(client, sizes, args.change_weights, args.repeat, args.naive_max, args.naive_repeat, run_id)
    results["scaling"].update(figures)
    if "1000" in figures["first_release"]:
        results["first_release_1000"] = figures["first_release"]["1000"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--models", type=int, default=20, help="N: models in the repository of the main figures")
    parser.add_argument("--weights", type=int, default=4 * 1024 * 1024, help="W: bytes of weights per version folder")
    parser.add_argument(
        "--scale-sizes",
        default="20,200,1000",
        help="N values of the scaling figures (tiny models, one of them changed)",
    )
    parser.add_argument(
        "--change-weights",
        type=int,
        default=1024 * 1024,
        help="bytes of new weights the one-model change of the scaling figures writes",
    )
    parser.add_argument(
        "--naive-max",
        type=int,
        default=20,
        help="the naive pipeline (every model in one server) runs up to this many models (200: three "
        "minutes more of make bench, for its release at 200 models)",
    )
    parser.add_argument(
        "--naive-repeat",
        type=int,
        default=1,
        help="one-model changes the naive pipeline releases at each N of the scaling figures",
    )
    parser.add_argument(
        "--requirements-heavy",
        default=requirements_change.HEAVY,
        help="the requirement of the model beside the one whose requirement changes",
    )
    parser.add_argument("--skip-scaling", action="store_true", help="leave out the scaling figures")
    parser.add_argument("--skip-requirements", action="store_true", help="leave out the requirements change")
    parser.add_argument(
        "--upload-weights",
        type=int,
        default=upload.WEIGHTS,
        help="bytes of new weights of the one-model change whose upload goes beside the tests (upload_overlap)",
    )
    parser.add_argument("--skip-upload", action="store_true", help="leave out the upload beside the tests")
    parser.add_argument(
        "--upload-repeat",
        type=int,
        default=1,
        help="releases a side of the upload beside the tests (each moves 512 MiB: minutes a round)",
    )
    parser.add_argument("--sizes", default="10,100,1000", help="model counts for the validate and changed figures")
    parser.add_argument("--history", default="200,500", help="MODELS,COMMITS of the history `changed` runs over")
    parser.add_argument("--cases", type=int, default=200, help="golden cases sent per throughput figure")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", default="bench/results.json", help="where the figures go")
    parser.add_argument("--plot", metavar="FILE", default="bench/results.png", help="where the plot goes")
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="measure a tree whose src/, bench/ or pyproject.toml differ from HEAD (recorded as <sha>+modified); "
        "without it such a tree is refused",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the smoke run: every part at a tiny size, once ("
        + ", ".join(f"{k}={v}" for k, v in QUICK.items())
        + "); no figure of it is worth reading",
    )
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    measured = revision(allow_dirty=args.allow_dirty)  # before anything is measured: a dirty tree stops here
    results: dict = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "revision": measured,
        "profile": "quick" if args.quick else "full",
        "n_models": args.models,
        "weights_bytes": args.weights,
        "scaling": {"validate_s": {}, "changed_s": {}},
    }
    pipeline.action_env()  # perf_analyzer present, before anything is measured
    results["default_path"] = {
        "perf_analyzer": str(pipeline.PERF_ANALYZER),
        "max_latency_increase": None,
        "measure_latency": False,
    }
    print(pipeline.DEFAULT_PATH, flush=True)
    run_id = time.strftime("%Y%m%d%H%M%S")
    release_comparison(args, results, run_id)
    if not args.skip_scaling:
        scaling(args, results, run_id)
    if not args.skip_requirements:
        results["requirements_change"] = requirements_change.measure(
            docker.from_env(timeout=600), args.requirements_heavy, run_id=run_id
        )
    if not args.skip_upload:
        results["upload_overlap"] = upload.measure(
            docker.from_env(timeout=600), args.upload_weights, args.upload_repeat, run_id
        )
    results["rebuild"] = rebuild.measure(args.models, args.weights, args.repeat)
    served = serve.measure(args.models, 1024, args.repeat, cases=args.cases)
    results["ready_s"] = served["ready_s"]
    results["golden_cases_per_s"] = served["golden_cases_per_s"]
    tr = [sys.executable, "-m", "triton_release"]
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"repo{n}"
            first, _ = generate_history(root, n, 50)
            models = str(root / "model_repository")
            validate = statistics.median(time_command([*tr, "validate", "--model-repository", models], args.repeat))
            changed = statistics.median(
                time_command([*tr, "changed", "--model-repository", models, "--base", first], args.repeat)
            )
            results["scaling"]["validate_s"][str(n)] = round(validate, 4)
            results["scaling"]["changed_s"][str(n)] = round(changed, 4)
        root = Path(tmp) / "history"
        n_models, n_commits = (int(v) for v in args.history.split(","))
        first, _ = generate_history(root, n_models, n_commits)
        times = time_command(
            [*tr, "changed", "--model-repository", str(root / "model_repository"), "--base", first], args.repeat
        )
        results["changed_history_s"] = {
            "models": n_models,
            "commits": n_commits,
            "median": round(statistics.median(times), 4),
        }
    print(report.table(results), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    try:  # the fan-out's figures are measured apart (bench/fanout.py) and carry their own revision
        kept = {key: value for key, value in json.loads(Path(args.json).read_text()).items() if key in KEPT}
    except (OSError, ValueError, AttributeError):
        kept = {}
    Path(args.json).write_text(json.dumps({**results, **kept}, indent=2) + "\n")
    report.plot({**results, **kept}, Path(args.plot))  # `make bench` draws it again after the latency figures
    print(f"\nfigures: {args.json}; plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
