"""The benchmark's Markdown table and plot."""

from __future__ import annotations

from pathlib import Path

MIB = 1024 * 1024


def table(r: dict) -> str:
    rel, up, ready, rate, back = r["release_s"], r["uploaded_bytes"], r["ready_s"], r["golden_cases_per_s"], r["rollback_s"]
    scaling = r["scaling"]
    rows = [
        f"\n{r['machine']}, {r['date']}; N = {r['n_models']} models, W = {r['weights_bytes'] // MIB} MiB of weights "
        f"per version folder; medians.\n",
        "| figure | triton-release | naive | ratio | target |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| release of a one-model change (s) | {rel['triton_release']:.2f} | {rel['naive']:.2f} | {rel['ratio']:.2f} | <= 0.5 |",
        f"| bytes uploaded by that release (MiB) | {up['triton_release'] / MIB:.2f} | {up['naive'] / MIB:.2f} | "
        f"{up['ratio_to_changed']:.2f} x the changed version ({up['changed_version'] / MIB:.2f} MiB) | <= 1.1 x |",
        f"| server ready (s): changed model vs all | {ready['changed_only']:.2f} | {ready['all']:.2f} | {ready['ratio']:.2f} | < 0.25 |",
        f"| rollback (s): retag vs pull + tag + push | {back['retag']:.3f} | {back['pull_tag_push']:.2f} | {back['ratio']:.3f} | < 0.1 |",
        "",
        "| golden cases per second | sequential | 8 threads |", "| --- | ---: | ---: |",
        f"| HTTP | {rate['http']:.0f} | {rate['http_concurrent']:.0f} |",
        f"| gRPC | {rate['grpc']:.0f} | {rate['grpc_concurrent']:.0f} |",
        "",
        "| models | validate (s) | changed (s) |", "| ---: | ---: | ---: |",
        *[f"| {n} | {scaling['validate_s'][n]:.2f} | {scaling['changed_s'][n]:.2f} |" for n in scaling["validate_s"]],
        "",
        "| models | release, triton-release (s) | release, naive (s) | uploaded, triton-release (MiB) | uploaded, naive (MiB) |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *[f"| {n} | {scaling['release_s'][n]:.2f} | {scaling['naive_release_s'][n]:.2f} | "
          f"{scaling['uploaded_bytes'][n]['triton_release'] / MIB:.2f} | {scaling['uploaded_bytes'][n]['naive'] / MIB:.2f} |"
          for n in scaling["release_s"]],
    ]
    if "rebuild" in r:
        ours, naive = r["rebuild"]["ours"], r["rebuild"]["naive"]
        rows += ["", f"Image rebuild only: triton-release {ours['rebuild_s']:.2f} s ({ours['new_layers']} new layer of "
                 f"{ours['model_layers']}), one COPY {naive['rebuild_s']:.2f} s (its one layer new)."]
    return "\n".join(rows)


def plot(r: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scaling = r["scaling"]
    sizes = sorted(scaling["release_s"], key=int)
    x = [int(n) for n in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(x, [scaling["release_s"][n] for n in sizes], "o-", label="triton-release")
    left.plot(x, [scaling["naive_release_s"][n] for n in sizes], "s--", label="naive pipeline")
    left.set(xlabel="models in the repository", ylabel="release of a one-model change (s)", ylim=(0, None))
    right.plot(x, [scaling["uploaded_bytes"][n]["triton_release"] / MIB for n in sizes], "o-", label="triton-release")
    right.plot(x, [scaling["uploaded_bytes"][n]["naive"] / MIB for n in sizes], "s--", label="naive pipeline")
    right.set(xlabel="models in the repository", ylabel="bytes uploaded (MiB)", ylim=(0, None))
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend()
    fig.suptitle(f"One-model change, {r['weights_bytes'] // MIB} MiB of weights per version ({r['date']})")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
