"""`python -m bench.latency`: the latency gate's quality on this machine, measured, not assumed.

One image holds three Python models, each with a version 1 sleeping BASE ms per request and a
version 2 sleeping 1.0x (A/A: the same code), 1.2x or 1.5x as long. One server serves them; each
trial loads both versions of every model side by side (as drift does in a release) and runs the
gate on it exactly as a release does (models/latency/: warm-ups, alternating rounds at the
default count and window, the bootstrap interval, the cold starts), the three models in turn.

- false alarms: the share of A/A trials refused (goal: at most 1 in 20) and inconclusive;
- detection: the share of 1.5x trials refused (goal: at least 19 in 20), and of 1.2x;
- cost: the seconds the gate adds per model (goal: at most 6 s at the default rounds), split into
  its rounds (warm-ups and the pairs, which stop early once decided) and its cold starts, the pairs
  each trial took, and for a 10-model change (goal: at most 40 s): one release's test step of 10
  changed models with the gate against without.

The slowdown is the sleep's; the server's and gRPC's own time per request (about 0.6 ms here) is
the same in both versions, so the latency ratio a perfect measurement would give is a little below
the sleep ratio: the figures give the measured ratios beside it. Merges its figures into
bench/results.json under `latency` and draws bench/latency.png. Needs the local stack (`make
stack`, which installs perf_analyzer).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import docker

from bench.generate import ADD_ONE_CONFIG
from bench.revision import revision

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "local/tritonserver:24.10-py3"
PERF_ANALYZER = ROOT / ".stack" / "perf_analyzer" / "bin" / "perf_analyzer"
SLOWDOWNS = {"aa": 1.0, "slow12": 1.2, "slow15": 1.5}
GOAL_FALSE_ALARMS = 1 / 20
GOAL_DETECTION = 19 / 20
GOAL_COST_S = 6.0
GOAL_TEN_S = 40.0

MODEL = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            time.sleep({seconds!r})
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", (x + 1).astype(np.float32))]))
        return responses
"""
CASE = {
    "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}],
    "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "data": [2, 3, 4, 5]}],
}


def write_models(root: Path, slowdowns: dict[str, float], base_ms: float) -> Path:
    for name, slowdown in slowdowns.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "2").mkdir()
        (root / name / "golden").mkdir()
        (root / name / "config.pbtxt").write_text(ADD_ONE_CONFIG.format(name=name))
        (root / name / "1" / "model.py").write_text(MODEL.format(seconds=base_ms / 1000))
        (root / name / "2" / "model.py").write_text(MODEL.format(seconds=base_ms * slowdown / 1000))
        (root / name / "golden" / "basic.json").write_text(json.dumps(CASE))
    return root


def built(folder: Path, name: str, slowdowns: dict[str, float], base_ms: float):
    """The models written under `folder` and built as triton-release-bench/`name`: the repository
    and the image's tag."""
    from triton_release import steps
    from triton_release.models.repository import Repository

    repo = Repository.load(write_models(folder / "model_repository", slowdowns, base_ms))
    tag = f"triton-release-bench/{name}:{time.strftime('%Y%m%d%H%M%S')}"
    steps.build(repo, BASE_IMAGE, tag)
    return repo, tag


def gate_options(args):
    """The gate measured: the bound, rounds and window of the command line."""
    from triton_release.models.latency import LatencyOptions

    return LatencyOptions(
        max_increase=args.bound,
        rounds=args.rounds,
        interval_ms=args.interval,
        perf_analyzer=args.perf_analyzer,
        env=dict(os.environ),
    )


def trials(args, client, tmp: Path) -> dict:
    """Every trial of every slowdown, in one server: the gate's figures per trial."""
    from triton_release.models.drift import drift_config
    from triton_release.models.latency import LatencyMeter
    from triton_release.models.latency.perf_analyzer import find
    from triton_release.server.container import TritonServer

    repo, tag = built(tmp / "gate", "latency", SLOWDOWNS, args.base_ms)
    options = gate_options(args)
    analyzer = find(options.perf_analyzer, options.env)
    found: dict[str, list[dict]] = {name: [] for name in SLOWDOWNS}
    try:
        with (
            TritonServer(tag, {name: 2 for name in SLOWDOWNS}, load_timeout=120, client=client) as server,
            LatencyMeter(
                repo, server, {n: 1 for n in SLOWDOWNS}, {n: 2 for n in SLOWDOWNS}, options, analyzer
            ) as meter,
        ):
            for trial in range(args.trials):
                for name in SLOWDOWNS:
                    why = server.load_config(name, drift_config(repo[name].config, [1, 2]), [1, 2])  # as drift does
                    if why:
                        raise RuntimeError(f"{name}: both versions did not load: {why}")
                    started = time.monotonic()
                    driven = meter.measure(name)
                    rounds_s = time.monotonic() - started
                    measured = meter.cold_start(driven)  # as a wave does: its cold start after
                    if not measured.measured:
                        raise RuntimeError(f"{name}: not measured: {measured.note}")
                    compared = measured.comparisons[0]
                    found[name].append(
                        {
                            "verdict": measured.verdict,
                            "ratio": compared.p50.estimate,
                            "low": compared.p50.low,
                            "high": compared.p50.high,
                            "p50_before_us": compared.before.p50_us,
                            "p50_after_us": compared.after.p50_us,
                            "seconds": measured.seconds,
                            "rounds_s": rounds_s,
                            "cold_start_s": measured.seconds - driven.seconds,
                            "pairs": compared.pairs,
                        }
                    )
                    print(
                        f"trial {trial + 1}/{args.trials} {name} ({SLOWDOWNS[name]}x sleep): p50 ratio "
                        f"{compared.p50.shown()} -> {measured.verdict} after {compared.pairs} pairs, {measured.seconds:.1f} s "
                        f"({rounds_s:.1f} s rounds, {measured.seconds - driven.seconds:.1f} s cold start)",
                        flush=True,
                    )
    finally:
        client.images.remove(tag, force=True)
    return found


def ten_model_change(args, client, tmp: Path) -> dict:
    """One release's test step of `args.ten` changed models (versions 1 and 2 alike), without the
    gate, on the action's default path (no bound, perf_analyzer on PATH: the gates its default
    settings resolve to) and with the gate: the seconds each adds."""
    from bench.pipeline import action_env
    from triton_release import steps
    from triton_release.models.gates import GateOptions
    from triton_release.settings import ServerOptions, resolve

    names = {f"m{i}": 1.0 for i in range(args.ten)}
    repo, tag = built(tmp / "ten", "latency-ten", names, 1.0)
    options = gate_options(args)
    try:
        start = time.perf_counter()
        steps.test(repo, tag, list(names), server_options=ServerOptions(load_timeout=120), new_versions=tuple(names))
        without = time.perf_counter() - start
        start = time.perf_counter()
        default = GateOptions.from_settings(resolve({}, cwd=tmp), action_env())
        plain = steps.test(
            repo,
            tag,
            list(names),
            server_options=ServerOptions(load_timeout=120),
            new_versions=tuple(names),
            gates=default,
        )
        by_default = time.perf_counter() - start
        start = time.perf_counter()
        run = steps.test(
            repo,
            tag,
            list(names),
            server_options=ServerOptions(load_timeout=120),
            new_versions=tuple(names),
            gates=GateOptions(latency=options),
        )
        gated = time.perf_counter() - start
    finally:
        client.images.remove(tag, force=True)
    verdicts = [m.verdict for m in run.latency.models]
    assert plain.latency is not None and not plain.latency.models, "the default path measured latency"
    print(
        f"{args.ten}-model change: test step {without:.1f} s without the gate, {by_default:.1f} s on the "
        f"action's default path (perf_analyzer present, no bound: {plain.latency.note}), {gated:.1f} s with "
        f"the gate (+{gated - without:.1f} s); verdicts {verdicts}",
        flush=True,
    )
    return {
        "models": args.ten,
        "test_without_gate_s": round(without, 1),
        "test_default_path_s": round(by_default, 1),
        "default_path_added_s": round(by_default - without, 1),
        "test_with_gate_s": round(gated, 1),
        "added_s": round(gated - without, 1),
        "refused": verdicts.count("refused"),
        "goal": GOAL_TEN_S,
        "goal_met": gated - without <= GOAL_TEN_S,
    }


def summarize(found: dict[str, list[dict]]) -> dict:
    def shares(rows: list[dict]) -> dict:
        n = len(rows)
        count = {v: sum(r["verdict"] == v for r in rows) for v in ("refused", "inconclusive", "pass")}
        return {
            "trials": n,
            **count,
            **{f"share_{v}": round(c / n, 3) for v, c in count.items()},
            "median_ratio": round(statistics.median(r["ratio"] for r in rows), 3),
        }

    scenarios = {
        name: {
            "sleep_ratio": SLOWDOWNS[name],
            **shares(rows),
            "trials_detail": [{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in rows],
        }
        for name, rows in found.items()
    }
    costs = [r["seconds"] for rows in found.values() for r in rows]
    aa, s15, s12 = scenarios["aa"], scenarios["slow15"], scenarios["slow12"]
    return {
        "false_alarms": {
            "share_refused": aa["share_refused"],
            "share_inconclusive": aa["share_inconclusive"],
            "trials": aa["trials"],
            "goal": "<= 1 in 20 refused",
            "goal_met": aa["share_refused"] <= GOAL_FALSE_ALARMS,
        },
        "detection": {
            "1.5x": {
                "share_refused": s15["share_refused"],
                "share_inconclusive": s15["share_inconclusive"],
                "median_ratio": s15["median_ratio"],
                "goal": ">= 19 in 20 refused",
                "goal_met": s15["share_refused"] >= GOAL_DETECTION,
            },
            "1.2x": {
                "share_refused": s12["share_refused"],
                "share_inconclusive": s12["share_inconclusive"],
                "median_ratio": s12["median_ratio"],
            },
        },
        "cost_s": {
            "per_model_median": round(statistics.median(costs), 2),
            "per_model_max": round(max(costs), 2),
            "rounds_median": round(statistics.median(r["rounds_s"] for rows in found.values() for r in rows), 2),
            "cold_start_median": round(
                statistics.median(r["cold_start_s"] for rows in found.values() for r in rows), 2
            ),
            "pairs": {name: dict(sorted(Counter(r["pairs"] for r in rows).items())) for name, rows in found.items()},
            "goal": GOAL_COST_S,
            "goal_met": statistics.median(costs) <= GOAL_COST_S,
        },
        "scenarios": scenarios,
    }


def table(figures: dict) -> str:
    fa, det, cost = figures["false_alarms"], figures["detection"], figures["cost_s"]
    ten = figures.get("ten_model_change") or {}
    lines = [
        f"\nlatency gate: bound {figures['bound']:g}, {figures['rounds']} rounds per version, "
        f"{figures['interval_ms']} ms windows, {figures['trials']} trials, version 1 sleeping "
        f"{figures['base_sleep_ms']} ms\n",
        "| figure | measured | goal |",
        "| --- | ---: | --- |",
        f"| A/A refused (false alarms) | {fa['share_refused']:.0%} | <= 5% |",
        f"| A/A inconclusive | {fa['share_inconclusive']:.0%} | |",
        f"| 1.5x refused (detection) | {det['1.5x']['share_refused']:.0%} (median ratio "
        f"{det['1.5x']['median_ratio']:.2f}) | >= 95% |",
        f"| 1.2x refused | {det['1.2x']['share_refused']:.0%} (median ratio {det['1.2x']['median_ratio']:.2f}; "
        f"inconclusive {det['1.2x']['share_inconclusive']:.0%}) | reported |",
        f"| gate's seconds per model (median, max) | {cost['per_model_median']:.1f}, {cost['per_model_max']:.1f} "
        f"| <= {GOAL_COST_S:g} |",
        f"| of which rounds, cold starts (medians) | {cost['rounds_median']:.1f}, {cost['cold_start_median']:.1f} | |",
        f"| pairs measured (pairs: trials) | {cost['pairs']} | |",
    ]
    if ten:
        lines.append(
            f"| gate's seconds for a {ten['models']}-model change | {ten['added_s']:.1f} | <= {GOAL_TEN_S:g} |"
        )
        if "default_path_added_s" in ten:
            lines.append(
                f"| latency's seconds for a {ten['models']}-model change on the default path (no bound, "
                f"perf_analyzer present) | {ten['default_path_added_s']:.1f} | <= {ten['models']} (1 s a model) |"
            )
    return "\n".join(lines)


def plot(figures: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(7, 4.5))
    for scenario in figures["scenarios"].values():
        rows = scenario["trials_detail"]
        xs = [scenario["sleep_ratio"] + (i - len(rows) / 2) * 0.004 for i in range(len(rows))]
        ratios = [r["ratio"] for r in rows]
        errors = [[r["ratio"] - r["low"] for r in rows], [r["high"] - r["ratio"] for r in rows]]
        colors = [
            "tab:red" if r["verdict"] == "refused" else "tab:orange" if r["verdict"] == "inconclusive" else "tab:green"
            for r in rows
        ]
        axis.errorbar(xs, ratios, yerr=errors, fmt="none", ecolor="grey", alpha=0.6)
        axis.scatter(xs, ratios, c=colors, s=14, zorder=3)
    axis.plot([0.95, 1.55], [0.95, 1.55], ":", color="grey", label="measured = sleep ratio")
    axis.axhline(1 + figures["bound"], color="tab:red", linestyle="--", label=f"1 + bound ({1 + figures['bound']:g})")
    axis.set(
        xlabel="true slowdown of version 2 (its sleep / version 1's)",
        ylabel="measured p50 ratio and its 95% interval",
        title=f"Latency gate, {figures['trials']} trials each, {figures['rounds']} rounds per version "
        f"({figures['date']})",
    )
    axis.scatter([], [], c="tab:red", s=14, label="refused")
    axis.scatter([], [], c="tab:orange", s=14, label="inconclusive")
    axis.scatter([], [], c="tab:green", s=14, label="pass")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from triton_release.models.latency import DEFAULT_INTERVAL_MS, DEFAULT_ROUNDS

    parser = argparse.ArgumentParser(prog="python -m bench.latency")
    parser.add_argument("--trials", type=int, default=20, help="trials of each slowdown (the goals need 20)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds per version (the default's)")
    parser.add_argument("--interval", type=int, default=DEFAULT_INTERVAL_MS, help="ms of one window (the default's)")
    parser.add_argument("--bound", type=float, default=0.1, help="max-latency-increase of the gate measured")
    parser.add_argument("--base-ms", type=float, default=5.0, help="what version 1 sleeps per request")
    parser.add_argument("--ten", type=int, default=10, help="models of the many-model change (0: leave it out)")
    parser.add_argument("--perf-analyzer", default=str(PERF_ANALYZER))
    parser.add_argument(
        "--json",
        metavar="FILE",
        default="bench/results.json",
        help="the figures file the `latency` figures are merged into",
    )
    parser.add_argument("--plot", metavar="FILE", default="bench/latency.png")
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="measure a tree whose src/, bench/ or pyproject.toml differ from HEAD (recorded as <sha>+modified)",
    )
    args = parser.parse_args(argv)
    measured = revision(allow_dirty=args.allow_dirty)  # before anything is measured: a dirty tree stops here
    from bench.pipeline import action_env

    action_env()  # perf_analyzer present and the modules compiled, before anything is measured
    client = docker.from_env(timeout=600)
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        found = trials(args, client, Path(tmp))
        figures = {
            "revision": measured,
            "date": time.strftime("%Y-%m-%d"),
            "bound": args.bound,
            "rounds": args.rounds,
            "interval_ms": args.interval,
            "trials": args.trials,
            "base_sleep_ms": args.base_ms,
            **summarize(found),
        }
        if args.ten:
            figures["ten_model_change"] = ten_model_change(args, client, Path(tmp))
    print(table(figures), flush=True)
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.exists() else {}
    results["latency"] = figures
    path.write_text(json.dumps(results, indent=2) + "\n")
    plot(figures, Path(args.plot))
    print(f"\nfigures: {args.json} (latency); plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
