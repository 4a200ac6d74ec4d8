"""`python -m bench`: prints a Markdown table of what it measured.

So far: `validate` and `changed` at 10, 100 and 1000 generated models, `changed` between the
first and last commit of a 200-model, 500-commit history, and the image rebuild after a
one-model change in a 20-model repository against a one-COPY build, server readiness for the
changed model against every model, and golden throughput over HTTP and gRPC (needs `make stack`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import rebuild, serve
from bench.generate import generate_history


def time_command(cmd: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--sizes", default="10,100,1000", help="model counts for the scaling figures")
    parser.add_argument("--history", default="200,500", help="MODELS,COMMITS of the history `changed` runs over")
    parser.add_argument("--rebuild", default="20,4194304", help="MODELS,WEIGHT_BYTES of the rebuild comparison")
    parser.add_argument("--serve", default="20,1024", help="MODELS,WEIGHT_BYTES of the readiness and throughput figures")
    parser.add_argument("--cases", type=int, default=200, help="golden cases sent per throughput figure")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="also write the figures there")
    args = parser.parse_args(argv)
    results: dict = {"validate_s": {}, "changed_s": {}}
    tr = [sys.executable, "-m", "triton_release"]
    print("| models | validate median (s) | changed median (s) |")
    print("| ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            root = Path(tmp) / f"repo{n}"
            first, _ = generate_history(root, n, 50)
            models = str(root / "model_repository")
            validate = statistics.median(time_command([*tr, "validate", "--model-repository", models], args.repeat))
            changed = statistics.median(time_command([*tr, "changed", "--model-repository", models,
                                                      "--base", first], args.repeat))
            results["validate_s"][str(n)] = round(validate, 4)
            results["changed_s"][str(n)] = round(changed, 4)
            print(f"| {n} | {validate:.3f} | {changed:.3f} |", flush=True)
        root = Path(tmp) / "history"
        n_models, n_commits = (int(v) for v in args.history.split(","))
        first, _ = generate_history(root, n_models, n_commits)
        times = time_command([*tr, "changed", "--model-repository", str(root / "model_repository"),
                              "--base", first], args.repeat)
        results["changed_history_s"] = {"models": n_models, "commits": n_commits,
                                        "median": round(statistics.median(times), 4)}
        print(f"\n`changed` over {n_models} models and {n_commits} commits: median {statistics.median(times):.3f} s, "
              f"spread {max(times) - min(times):.3f} s")
    n_models, weights = (int(v) for v in args.rebuild.split(","))
    results["rebuild"] = rebuild.measure(n_models, weights, max(1, min(args.repeat, 3)))
    print(rebuild.table(results["rebuild"]), flush=True)
    n_models, weights = (int(v) for v in args.serve.split(","))
    results["serve"] = serve.measure(n_models, weights, max(1, min(args.repeat, 3)), cases=args.cases)
    print(serve.table(results["serve"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
