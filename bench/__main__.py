"""`python -m bench` (`make bench`): triton-release against the naive pipeline, in one run.

On generated repositories of N Python models with W bytes of weights per version folder: the
release of a one-model change (time and bytes uploaded, at N = 5, 20, 50), the image rebuild,
server readiness (changed model vs every model), golden throughput, rollback (retag vs pull,
tag, push), and `validate`/`changed` at 10, 100 and 1000 models. Prints a Markdown table,
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

from bench import pipeline, rebuild, report, serve
from bench.generate import generate_history


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


def release_comparison(args, results: dict) -> None:
    client = docker.from_env(timeout=600)
    run_id = time.strftime("%Y%m%d%H%M%S")
    sizes = sorted({int(s) for s in args.release_sizes.split(",")} | {args.models})
    by_size = {}
    for n in sizes:
        by_size[n] = pipeline.measure_size(client, n, args.weights, args.repeat if n == args.models else 1, run_id)
        m = by_size[n]
        print(f"release of a one-model change, {n} models: triton-release {statistics.median(m['times']['triton_release']):.2f} s, "
              f"naive {statistics.median(m['times']['naive']):.2f} s", flush=True)
    main_size = by_size[args.models]
    ours, naive = (statistics.median(main_size["times"][k]) for k in ("triton_release", "naive"))
    up_ours, up_naive = (statistics.median(main_size["uploaded"][k]) for k in ("triton_release", "naive"))
    changed = statistics.median(main_size["changed_version"])
    results["release_s"] = {"triton_release": round(ours, 3), "naive": round(naive, 3), "ratio": round(ours / naive, 3),
                            "spread": {"triton_release": spread(main_size["times"]["triton_release"]),
                                       "naive": spread(main_size["times"]["naive"])}}
    results["uploaded_bytes"] = {"triton_release": int(up_ours), "naive": int(up_naive), "changed_version": int(changed),
                                 "ratio_to_changed": round(up_ours / changed, 3) if changed else None}
    results["scaling"]["release_s"] = {str(n): round(statistics.median(m["times"]["triton_release"]), 3)
                                       for n, m in by_size.items()}
    results["scaling"]["naive_release_s"] = {str(n): round(statistics.median(m["times"]["naive"]), 3)
                                             for n, m in by_size.items()}
    results["scaling"]["uploaded_bytes"] = {str(n): {k: int(statistics.median(v)) for k, v in m["uploaded"].items()}
                                            for n, m in by_size.items()}
    results["rollback_s"] = pipeline.rollback_figures(client, main_size["ours_repo"], main_size["naive_repo"],
                                                      main_size["first_version"], "r0", args.repeat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--models", type=int, default=20, help="N: models in the repository of the main figures")
    parser.add_argument("--weights", type=int, default=4 * 1024 * 1024, help="W: bytes of weights per version folder")
    parser.add_argument("--release-sizes", default="5,20,50", help="N values of the release scaling figures")
    parser.add_argument("--sizes", default="10,100,1000", help="model counts for the validate and changed figures")
    parser.add_argument("--history", default="200,500", help="MODELS,COMMITS of the history `changed` runs over")
    parser.add_argument("--cases", type=int, default=200, help="golden cases sent per throughput figure")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", default="bench/results.json", help="where the figures go")
    parser.add_argument("--plot", metavar="FILE", default="bench/results.png", help="where the plot goes")
    args = parser.parse_args(argv)
    results: dict = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "n_models": args.models,
                     "weights_bytes": args.weights, "scaling": {"validate_s": {}, "changed_s": {}}}
    release_comparison(args, results)
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
            changed = statistics.median(time_command([*tr, "changed", "--model-repository", models,
                                                      "--base", first], args.repeat))
            results["scaling"]["validate_s"][str(n)] = round(validate, 4)
            results["scaling"]["changed_s"][str(n)] = round(changed, 4)
        root = Path(tmp) / "history"
        n_models, n_commits = (int(v) for v in args.history.split(","))
        first, _ = generate_history(root, n_models, n_commits)
        times = time_command([*tr, "changed", "--model-repository", str(root / "model_repository"),
                              "--base", first], args.repeat)
        results["changed_history_s"] = {"models": n_models, "commits": n_commits,
                                        "median": round(statistics.median(times), 4)}
    print(report.table(results), flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    report.plot(results, Path(args.plot))
    print(f"\nfigures: {args.json}; plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
