"""The benchmark's Markdown table and plot."""

from __future__ import annotations

import time
from pathlib import Path

MIB = 1024 * 1024


def default_path(path: dict) -> str:
    """How the releases measured ran: the action's default path (bench/pipeline.py, action_env)."""
    bound = path.get("max_latency_increase")
    return (
        f"Releases run as the action runs them: perf_analyzer present ({path.get('perf_analyzer')}), "
        f"max-latency-increase {bound if bound is not None else 'unset'}, measure-latency "
        f"{str(bool(path.get('measure_latency'))).lower()}"
        + (
            " (the action's defaults): no latency is measured.\n"
            if bound is None and not path.get("measure_latency")
            else ".\n"
        )
    )


def table(r: dict) -> str:
    rel, up, ready, rate, back = (
        r["release_s"],
        r["uploaded_bytes"],
        r["ready_s"],
        r["golden_cases_per_s"],
        r["rollback_s"],
    )
    scaling = r["scaling"]
    rows = [
        f"\n{r['machine']}, {r['date']}, triton-release {r.get('revision', '?')}; N = {r['n_models']} models, W = {r['weights_bytes'] // MIB} MiB of weights "
        f"per version folder; medians.\n",
        *([default_path(r["default_path"])] if "default_path" in r else []),
        "| figure | triton-release | naive | ratio | target |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| release of a one-model change (s) | {rel['triton_release']:.2f} | {rel['naive']:.2f} | {rel['ratio']:.2f} | <= 0.5 |",
        f"| bytes uploaded by that release (MiB) | {up['triton_release'] / MIB:.2f} | {up['naive'] / MIB:.2f} | "
        f"{up['ratio_to_changed']:.2f} x the changed version ({up['changed_version'] / MIB:.2f} MiB) | <= 1.1 x |",
        f"| server ready (s): changed model vs all | {ready['changed_only']:.2f} | {ready['all']:.2f} | {ready['ratio']:.2f} | < 0.25 |",
        f"| rollback (s): retag vs pull + tag + push | {back['retag']:.3f} | {back['pull_tag_push']:.2f} | {back['ratio']:.3f} | < 0.1 |",
        "",
        "| golden cases per second | sequential | 8 threads |",
        "| --- | ---: | ---: |",
        f"| HTTP | {rate['http']:.0f} | {rate['http_concurrent']:.0f} |",
        f"| gRPC | {rate['grpc']:.0f} | {rate['grpc_concurrent']:.0f} |",
        "",
        "| models | validate (s) | changed (s) |",
        "| ---: | ---: | ---: |",
        *[f"| {n} | {scaling['validate_s'][n]:.2f} | {scaling['changed_s'][n]:.2f} |" for n in scaling["validate_s"]],
    ]
    if rel.get("steps"):
        rows += steps_table(rel)
    if "rebuild" in r:
        ours, naive = r["rebuild"]["ours"], r["rebuild"]["naive"]
        rows += [
            "",
            f"Image rebuild only: triton-release {ours['rebuild_s']:.2f} s ({ours['new_layers']} new layer of "
            f"{ours['model_layers']}), one COPY {naive['rebuild_s']:.2f} s (its one layer new).",
        ]
    if "release_s" in scaling and "first_release" in scaling:
        rows += scaling_table(scaling)
    if "requirements_change" in r:
        rows += requirements_table(r["requirements_change"])
    if r.get("upload_overlap"):
        rows += upload_table(r["upload_overlap"])
    return "\n".join(rows)


def upload_table(u: dict) -> list[str]:
    """The upload beside the tests: ours with it, ours with the daemon's push after the tests (the
    release before it), and the naive pipeline, side by side."""
    sides = [("overlap", "upload during the tests"), ("daemon", "daemon push after the tests")]
    if u.get("naive"):
        sides.append(("naive", "naive"))
    rows = [
        "",
        f"The upload beside the tests: a one-model change with {size(u['new_weights_bytes'])} of new random "
        f"weights, {u['models']} small models; medians of {u['repeat']} runs. The daemon side is the same "
        "change released with --upload-during-tests false; the upload's seconds are its thread's "
        "(overlap) or the push step's (daemon, naive).\n",
        "| figure | " + " | ".join(label for _, label in sides) + " |",
        "| --- |" + " ---: |" * len(sides),
    ]
    figures = (
        ("release (s)", "release_s", seconds),
        ("build (s)", "build_s", seconds),
        ("test (s)", "test_s", seconds),
        ("upload (s)", "upload_s", seconds),
        ("push step (s)", "push_s", seconds),
        ("other steps, start-up (s)", "other_s", seconds),
        ("bytes uploaded", "uploaded_bytes", size),
        ("pushed by", "pushed_by", lambda v: ", ".join(v) if isinstance(v, list) else str(v)),
    )
    for label, key, shown in figures:
        cells = []
        for side, _ in sides:
            data = u[side] or {}
            value = data.get(key)
            if key == "test_s" and side == "naive":
                value = data.get("serve+check_s")
            if key == "upload_s" and side != "overlap":
                value = data.get("push_s")
            if key == "pushed_by" and side == "naive":
                value = "docker push"
            cells.append("" if value is None else shown(value))
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    over_max, over_sum = u.get("release_over_max"), u.get("release_over_sum")
    rows += [
        "",
        f"Release over max(test, upload): {seconds(over_max)} (goal <= {u['goal']}: {met(u['met'])}); "
        f"release over test + upload: {seconds(over_sum)}; today's test + upload (the daemon side's test "
        f"and push steps): {seconds(u.get('today_test_plus_upload_s'))} s; the test and push steps over "
        f"max(test, upload): {seconds(u.get('test_and_push_over_max'))}.",
    ]
    for side, label in sides[:2]:
        steps = (u[side] or {}).get("steps")
        if steps:
            rows.append(
                f"\nSteps, {label} (s): " + ", ".join(f"{name} {value:.2f}" for name, value in steps.items()) + "."
            )
    return rows


def steps_table(rel: dict) -> list[str]:
    """The one-model release step by step, ours beside the naive pipeline's phases."""
    ours, naive = rel["steps"]["triton_release"], rel["steps"]["naive"]
    rows = [
        "",
        "Where the release of a one-model change spends its time (s; medians of each step over the runs, "
        "which need not add up to the total's median). The test step is split into its phases (its report's "
        '`phases`); "outside the steps" is the command\'s start-up, settings and report.\n',
        "| step | triton-release (s) | naive (s) |",
        "| --- | ---: | ---: |",
    ]
    for name in [*ours, *(name for name in naive if name not in ours)]:  # build and push: one row each
        shown = [f"{side[name]:.2f}" if name in side else "" for side in (ours, naive)]
        rows.append(f"| {name} | {shown[0]} | {shown[1]} |")
    rows.append(f"| **total** (median) | **{rel['triton_release']:.2f}** | **{rel['naive']:.2f}** |")
    return rows


def size(n: int | None) -> str:
    if n is None:
        return "not run"
    for unit, scale in (("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def seconds(value: float | None) -> str:
    return "not run" if value is None else f"{value:.2f}"


def met(flag: bool) -> str:
    return "met" if flag else "**not met**"


def scaling_table(s: dict) -> list[str]:
    sizes = sorted(s["release_s"], key=int)
    rows = [
        "",
        f"Release of a one-model change against the number of models: tiny models (the add-one model, no "
        f"weights); the change writes {size(s['change_bytes'])} of new weights into the changed model's version "
        f"folder. Both pipelines warm; triton-release: medians of {s['repeat']}, naive: "
        f"{'median of ' + str(s['naive_repeat']) if s.get('naive_repeat', 1) > 1 else 'one run'}.\n",
        "| models | release, triton-release (s) | its runs (s) | release, naive (s) | uploaded, triton-release "
        "| uploaded, naive | changed version | uploaded / changed |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in sizes:
        up = s["uploaded_bytes"][n]
        runs = ", ".join(f"{t:.1f}" for t in s.get("runs_s", {}).get(n, {}).get("triton_release", []))
        rows.append(
            f"| {n} | {s['release_s'][n]:.2f} | {runs} | {seconds(s['naive_release_s'][n])} "
            f"| {size(up['triton_release'])} | {size(up['naive'])} | {size(up['changed_version'])} "
            f"| {up['ratio_to_changed']:.3f} |"
        )
    goals = s["goals"]
    t, u = goals["release_time"], goals["uploaded_over_changed"]
    rows += [
        "",
        "| goal | measured | target | |",
        "| --- | ---: | ---: | --- |",
        f"| triton-release at {t['of']} models / at {t['over']} | {t['ratio']:.2f} | <= {t['target']} | {met(t['met'])} |",
        f"| uploaded / changed, worst N | {u['worst']:.3f} | <= {u['target']} | {met(u['met'])} |",
    ]
    by_step = s.get("seconds_by_step", {})
    if by_step:
        steps = list(by_step[sizes[-1]])
        rows += [
            "",
            "Where triton-release's one-model change spends its time (s, the last run at each N):\n",
            "| models | " + " | ".join(steps) + " |",
            "| ---: |" + " ---: |" * len(steps),
        ]
        rows += [f"| {n} | " + " | ".join(f"{by_step[n].get(step, 0):.2f}" for step in steps) + " |" for n in sizes]
    for n, why in sorted(s["naive_skipped"].items(), key=lambda kv: int(kv[0])):
        rows.append(f"\nNaive pipeline at {n} models: {why}.")
    rows += [
        "",
        "First release of N tiny models (the warm-up of each row above): test waves of at most 50 models "
        "loaded, the server's peak memory, the image's layers (base included; the release's own in brackets).\n",
        "| models | release (s) | test (s) | waves | server peak memory (GB) | image layers |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n in sizes:
        f = s["first_release"][n]
        peak = f["peak_memory_bytes"]
        rows.append(
            f"| {n} | {f['release_s']:.1f} | {f['test_s']:.1f} | {f['waves']} | "
            f"{'?' if peak is None else f'{peak / 1e9:.2f}'} | {f['image_layers']} ({f['release_layers']}) |"
        )
    if "1000" in s["first_release"]:
        peak = s["first_release"]["1000"]["peak_memory_bytes"]
        rows.append(
            f"\nGoal: peak memory of the first release of 1000 models under 4 GB: "
            f"{'?' if peak is None else f'{peak / 1e9:.2f} GB'}, {met(peak is not None and peak < 4e9)}."
        )
    return rows


def requirements_table(q: dict) -> list[str]:
    rel, up = q["release_s"], q["uploaded_bytes"]
    rows = [
        "",
        f"A requirements change: model s moves from {q['changed_from']} to {q['changed_to']}; model t, beside "
        f"it, needs {q['heavy']} and imports it. Both pipelines warm; one run. The naive pipeline installs every "
        "model's requirements with `pip install --target` into one site-packages layer, serves every model, "
        "pushes.\n",
        "| figure | triton-release | naive | ratio | target | |",
        "| --- | ---: | ---: | ---: | --- | --- |",
        f"| release (s) | {rel['triton_release']:.2f} | {rel['naive']:.2f} | {rel['ratio']:.3f} | <= {rel['target']} "
        f"| {met(rel['met'])} |",
        f"| bytes uploaded (new layers) | {size(up['triton_release'])} | {size(up['naive'])} | "
        f"{up['ratio_to_wheel']:.2f} x the changed wheel ({up['wheel']}, {size(up['changed_wheel'])}) | "
        f"<= {up['target']} x | {met(up['met'])} |",
        "",
        "Layers that release uploaded (compressed sizes, from the registry's manifests):\n",
        "| layer | items | bytes |",
        "| --- | --- | ---: |",
    ]
    for layer in q["new_layers"]:
        rows.append(f"| {layer['layer']} | {', '.join(layer['items'])} | {layer['bytes']} |")
    steps = q.get("seconds_by_step")
    if steps:
        for name, label in (("triton_release", "triton-release"), ("naive", "naive")):
            rows.append(
                f"\nWhere the {label} release's time went (s): "
                + ", ".join(f"{step} {value:.1f}" for step, value in steps[name].items())
                + "."
            )
    rows.append(
        f"\nBesides layers, the push sends the image configuration ({q['config_bytes']} bytes, with its "
        f"labels) and the manifest ({q['manifest_bytes']} bytes). First releases: triton-release "
        f"{q['first_release_s']['triton_release']:.1f} s, naive {q['first_release_s']['naive']:.1f} s."
    )
    return rows


STEP_COLOURS = {  # one colour per kind of work, ours and naive alike
    "build": "tab:blue",
    "push": "tab:green",
    "serve+check": "firebrick",
    "test: server_start": "tab:red",
    "test: load": "tab:orange",
    "test: golden_cases": "tab:purple",
    "test: drift_load": "gold",
    "test: drift": "khaki",
    "test: latency": "tab:brown",
    "outside the steps": "silver",
}
PALETTE = ("tab:cyan", "tab:olive", "tab:pink", "lightsteelblue", "thistle", "wheat")  # the other steps


def plot(r: dict, out: Path) -> None:
    """The figures a reader wants at a glance: the one-model release by step, ours beside naive;
    the latency gate's power and cost (when its section exists); the release and the bytes against
    the number of models."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    release_by_step(axes[0][0], r)
    gate_power(axes[0][1], r.get("latency"))
    gate_cost(axes[0][2], r.get("latency"))
    scaling_plots(axes[1][0], axes[1][1], r)
    first_releases(axes[1][2], r.get("scaling", {}).get("first_release"))
    fig.suptitle(
        f"triton-release {str(r.get('revision', '?'))[:12]} on {r.get('machine', '?')}, {r.get('date', '?')}",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)


def not_measured(axis, title: str, why: str) -> None:
    axis.set_title(title, fontsize=10)
    axis.text(0.5, 0.5, why, ha="center", va="center", transform=axis.transAxes, fontsize=9, color="grey")
    axis.set_xticks([])
    axis.set_yticks([])


def release_by_step(axis, r: dict) -> None:
    rel = r.get("release_s") or {}
    title = f"One-model change among {r.get('n_models', '?')} models: release by step"
    if not rel.get("steps"):
        not_measured(axis, title, "no step-by-step figures in this file\n(a run before they were kept)")
        return
    columns = {"triton-release": rel["steps"]["triton_release"], "naive": rel["steps"]["naive"]}
    top = max(sum(steps.values()) for steps in columns.values())
    small = 0.015 * top  # thinner than this: one segment, "the rest"
    positions = (0.9, 1.9)  # the legend takes the left of the panel
    for x, (label, steps) in zip(positions, columns.items()):
        bottom, rest = 0.0, 0.0
        for name, seconds in steps.items():
            if seconds < small:
                rest += seconds
                continue
            colour = STEP_COLOURS.get(name) or PALETTE[sum(map(ord, name)) % len(PALETTE)]
            axis.bar(x, seconds, bottom=bottom, color=colour, edgecolor="white", width=0.5, label=name)
            if seconds >= 0.045 * top:
                axis.text(x, bottom + seconds / 2, f"{name} {seconds:.2f}", ha="center", va="center", fontsize=7)
            bottom += seconds
        if rest:
            axis.bar(x, rest, bottom=bottom, color="white", edgecolor="grey", hatch="//", width=0.5, label="the rest")
            bottom += rest
        total = rel["triton_release" if label == "triton-release" else "naive"]
        axis.text(x, bottom, f"{total:.2f} s (median)", ha="center", va="bottom", fontsize=8)
    handles, labels = axis.get_legend_handles_labels()
    shown = dict(zip(labels, handles))  # each name once: the same kind of work has the same colour in both
    axis.legend(list(shown.values()), list(shown), fontsize=6, loc="upper left")
    axis.set_xlim(-0.9, 2.4)
    axis.set_xticks(positions, list(columns))
    axis.set(ylabel="seconds (medians of each step)", ylim=(0, None))
    axis.set_title(f"{title} (ratio {rel.get('ratio', 0):.2f})", fontsize=10)
    axis.grid(alpha=0.3, axis="y")


SCENARIOS = (("A/A", "aa"), ("1.2x", "slow12"), ("1.5x", "slow15"))


def gate_power(axis, latency: dict | None) -> None:
    title = "Latency gate: share of trials refused"
    if not latency or "scenarios" not in latency:
        not_measured(axis, title, "not measured in this file\n(python -m bench.latency)")
        return
    scenarios = latency["scenarios"]
    names = [label for label, key in SCENARIOS if key in scenarios]
    refused = [scenarios[key]["share_refused"] for _, key in SCENARIOS if key in scenarios]
    inconclusive = [scenarios[key]["share_inconclusive"] for _, key in SCENARIOS if key in scenarios]
    axis.bar(names, refused, color="tab:red", label="refused")
    axis.bar(names, inconclusive, bottom=refused, color="tab:orange", label="inconclusive")
    for x, share in enumerate(refused):
        axis.text(x, share, f"{share:.0%}", ha="center", va="bottom", fontsize=8)
    axis.axhline(0.05, color="grey", linestyle=":", label="A/A goal <= 5%")
    axis.axhline(0.95, color="grey", linestyle="--", label="1.5x goal >= 95%")
    axis.set(ylim=(0, 1.05), ylabel="share of trials", xlabel="version 2's slowdown (its sleep)")
    axis.set_title(f"{title}, {latency.get('trials', '?')} trials each, bound {latency.get('bound', 0):g}", fontsize=10)
    axis.legend(fontsize=7, loc="upper left")
    axis.grid(alpha=0.3, axis="y")


def gate_cost(axis, latency: dict | None) -> None:
    title = "Latency gate: its cost"
    if not latency or "cost_s" not in latency:
        not_measured(axis, title, "not measured in this file\n(python -m bench.latency)")
        return
    cost = latency["cost_s"]
    bars = {"a model (median)": cost["per_model_median"], "a model (max)": cost["per_model_max"]}
    ten = latency.get("ten_model_change") or {}
    if ten:
        bars[f"a {ten['models']}-model change"] = ten["added_s"]
    axis.bar(list(bars), list(bars.values()), color=["tab:brown", "rosybrown", "tab:grey"][: len(bars)])
    for x, seconds in enumerate(bars.values()):
        axis.text(x, seconds, f"{seconds:.1f} s", ha="center", va="bottom", fontsize=8)
    if "goal" in cost:
        axis.axhline(cost["goal"], color="grey", linestyle="--", label=f"goal per model <= {cost['goal']:g} s")
        axis.legend(fontsize=7)
    axis.set(ylabel="seconds the gate adds", ylim=(0, None))
    axis.set_title(f"{title} ({latency.get('revision', '?')})", fontsize=10)
    axis.grid(alpha=0.3, axis="y")


def scaling_plots(left, right, r: dict) -> None:
    scaling = r.get("scaling", {})
    if "release_s" in scaling and "uploaded_bytes" in scaling:
        sizes = sorted(scaling["release_s"], key=int)
        x = [int(n) for n in sizes]
        naive = [n for n in sizes if scaling["naive_release_s"][n] is not None]
        left.plot(x, [scaling["release_s"][n] for n in sizes], "o-", label="triton-release")
        left.plot(
            [int(n) for n in naive], [scaling["naive_release_s"][n] for n in naive], "s--", label="naive pipeline"
        )
        right.plot(
            x, [scaling["uploaded_bytes"][n]["triton_release"] / MIB for n in sizes], "o-", label="triton-release"
        )
        right.plot(
            [int(n) for n in naive],
            [scaling["uploaded_bytes"][n]["naive"] / MIB for n in naive],
            "s--",
            label="naive pipeline",
        )
        right.plot(
            x,
            [scaling["uploaded_bytes"][n]["changed_version"] / MIB for n in sizes],
            ":",
            color="grey",
            label="the changed version folder",
        )
        for axis in (left, right):
            axis.set_xscale("log")
        skipped = (
            f"; naive not run at N = {', '.join(sorted(scaling['naive_skipped'], key=int))}"
            if scaling.get("naive_skipped")
            else ""
        )
        left.set_title(
            f"One-model change ({scaling['change_bytes'] / MIB:.2f} MiB) among N tiny models{skipped}", fontsize=10
        )
        right.set_title("Bytes that release uploaded", fontsize=10)
    left.set(xlabel="models in the repository", ylabel="release of a one-model change (s)", ylim=(0, None))
    right.set(xlabel="models in the repository", ylabel="bytes uploaded (MiB)", ylim=(0, None))
    for axis in (left, right):
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend(fontsize=8)


def first_releases(axis, first: dict | None) -> None:
    title = "First release of N tiny models"
    if not first:
        not_measured(axis, title, "not measured in this file")
        return
    sizes = sorted(first, key=int)
    x = [int(n) for n in sizes]
    axis.plot(x, [first[n]["release_s"] for n in sizes], "o-", label="release")
    axis.plot(x, [first[n]["test_s"] for n in sizes], "s--", label="its test step")
    axis.set_xscale("log")
    axis.set(xlabel="models in the repository", ylabel="seconds", ylim=(0, None))
    axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)


def run_figures(figures: dict, started: float, ended: float) -> dict:
    """The whole `make bench` run: its minutes, the revision of its main figures, and the sections
    of the figures file measured at that revision (a section measured apart keeps its own)."""
    measured = figures.get("revision")
    sections = sorted(
        key for key, value in figures.items() if isinstance(value, dict) and value.get("revision") == measured
    )
    return {"minutes": round((ended - started) / 60, 1), "revision": measured, "sections": sections}


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.report`: the table and the plot drawn again from a figures file (`make bench`
    runs it last, so that results.png shows the latency figures measured after the main ones)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m bench.report")
    parser.add_argument("--json", metavar="FILE", default="bench/results.json", help="the figures")
    parser.add_argument("--plot", metavar="FILE", default="bench/results.png", help="where the plot goes")
    parser.add_argument(
        "--started", type=float, metavar="EPOCH", help="when the run began (make bench): its minutes are recorded"
    )
    args = parser.parse_args(argv)
    figures = json.loads(Path(args.json).read_text())
    if args.started is not None:
        figures["make_bench"] = run_figures(figures, args.started, time.time())
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
        print(f"make bench: {figures['make_bench']['minutes']} minutes")
    plot(figures, Path(args.plot))
    print(f"plot: {args.plot} (from {args.json})")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
