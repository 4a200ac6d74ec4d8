"""The benchmark's Markdown table and plot."""

from __future__ import annotations

from pathlib import Path

MIB = 1024 * 1024


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
    return "\n".join(rows)


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


def plot(r: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scaling = r["scaling"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
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
            f"; naive pipeline not run at N = {', '.join(sorted(scaling['naive_skipped'], key=int))}"
            if scaling.get("naive_skipped")
            else ""
        )
        fig.suptitle(
            f"One-model change of {scaling['change_bytes'] / MIB:.2f} MiB among N tiny models ({r['date']}){skipped}"
        )
    left.set(xlabel="models in the repository", ylabel="release of a one-model change (s)", ylim=(0, None))
    right.set(xlabel="models in the repository", ylabel="bytes uploaded (MiB)", ylim=(0, None))
    for axis in (left, right):
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
