"""`python -m bench`: prints a Markdown table of what it measured.

So far: `validate` at 10, 100 and 1000 generated models (the full release benchmarks arrive
with the pipeline).
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

from bench.generate import generate_repository


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
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="also write the figures there")
    args = parser.parse_args(argv)
    results = {"validate_s": {}}
    print("| models | validate median (s) | spread (s) |")
    print("| ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            root = generate_repository(Path(tmp) / f"repo{n}", n)
            times = time_command([sys.executable, "-m", "triton_release", "validate", "--model-repository",
                                  str(root)], args.repeat)
            median = statistics.median(times)
            results["validate_s"][str(n)] = round(median, 4)
            print(f"| {n} | {median:.3f} | {max(times) - min(times):.3f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
