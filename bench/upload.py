"""The upload hidden behind the tests: a one-model change with W bytes of new weights (512 MiB).

A repository of a few small models is released once; then one model's new version gets W bytes of
new, random (incompressible) weights, and that change is released three ways, side by side in one
run, each from its own checkout to its own registry repository (each warm: its previous release
in the registry, the base image present):

- overlap: triton-release as it ships, its new layers uploaded by a thread while the golden cases
  run (`steps.push.pushed_by` "registry"), the push writing the config and the manifest;
- daemon: the same change with --upload-during-tests false, the release before the
  overlap: the golden cases, then `docker push` through the daemon (`pushed_by` "daemon");
- naive: one COPY, every model served, the changed model's cases, `docker push`.

Each checkout gets weights of its own (same size, other bytes): no checkout reuses a layer, a blob
or a build cache entry of another. Recorded for each: the release's seconds, its build, test and
push steps', the upload thread's own seconds (overlap) and the bytes uploaded (the new layers of
its manifest, from the registry), and the rest (the other steps, the command's start-up).

The figure: release / max(test, upload), goal <= 1.15; beside it release / (test + upload),
today's test + upload (the daemon side's test + push), and the part of the release the overlap
changes, its test and push steps, over max(test, upload) (the bump, build and commit of the new
weights come before and after it either way).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import docker

from bench import pipeline
from bench.generate import MODEL_PY, generate_repository, git
from triton_release.registry.client import RegistryRepository

MIB = 1024 * 1024
WEIGHTS = 512 * MIB  # new weights of the changed model's new version
MODELS = 4  # small models in the repository
SMALL_WEIGHTS = 4096  # bytes of weights each model starts with
GOAL = 1.15  # release <= GOAL x max(test, upload)
CHUNK = 8 * MIB
SIDES = ("overlap", "daemon")


def write_random(path: Path, size: int) -> None:
    """`size` random bytes into `path`, a chunk at a time (512 MiB never sits in memory)."""
    with open(path, "wb") as handle:
        left = size
        while left > 0:
            handle.write(os.urandom(min(CHUNK, left)))
            left -= CHUNK


def checkout(root: Path, models: int) -> None:
    generate_repository(root / "model_repository", models, SMALL_WEIGHTS)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "bench@example.com")
    git(root, "config", "user.name", "bench")
    git(root, "config", "core.looseCompression", "0")  # random weights: zlib would only cost time
    git(root, "config", "core.compression", "0")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "models")


def change(root: Path, model: str, round_: int, weights_bytes: int) -> None:
    """The model's newest version gets new code and `weights_bytes` of new random weights (the
    release moves it to the next version), committed."""
    folder = root / "model_repository" / model
    newest = max(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    (folder / str(newest) / "model.py").write_text(MODEL_PY.format(offset=1) + f"# change {round_}\n")
    write_random(folder / str(newest) / "weights.bin", weights_bytes)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"{model}: change {round_} with {weights_bytes} bytes of new weights")


def release_figures(elapsed: float, report: Mapping) -> dict:
    """One release's figures from its wall time and its report: the build, test and push steps'
    seconds, how it pushed, and the upload thread's seconds and bytes (None without one)."""
    steps = report["steps"]
    push = steps["push"]
    during = push.get("uploaded_during_tests") or {}
    build, test = steps["build"]["seconds"], steps["test"]["seconds"]
    return {
        "release_s": round(elapsed, 3),
        "build_s": build,
        "test_s": test,
        "push_s": push["seconds"],
        "other_s": round(max(0.0, elapsed - build - test - push["seconds"]), 3),  # the other steps, start-up
        "upload_s": during.get("seconds"),
        "upload_bytes": during.get("bytes_uploaded"),
        "pushed_by": push.get("pushed_by"),
        "steps": pipeline.step_seconds(dict(report)),  # every step's seconds: where "other" went
    }


def ratios(release: float, test: float, upload: float) -> dict:
    """release / max(test, upload) (the goal's figure) and release / (test + upload)."""
    return {
        "release_over_max": round(release / max(test, upload), 3) if max(test, upload) > 0 else None,
        "release_over_sum": round(release / (test + upload), 3) if test + upload > 0 else None,
    }


def medians(runs: Sequence[Mapping]) -> dict:
    """Each figure's median over the runs (numbers; None when a run lacks it), the rest as a list;
    the steps' seconds (`steps`), each step's median."""
    out: dict = {}
    for key in dict.fromkeys(key for run in runs for key in run):
        if key == "steps":
            out[key] = pipeline.median_steps([run.get("steps") or {} for run in runs])
            continue
        values = [run.get(key) for run in runs]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) == len(values) and numbers:
            out[key] = round(statistics.median(numbers), 3)
        elif all(v is None for v in values):
            out[key] = None
        else:
            out[key] = sorted({str(v) for v in values})
    return out


def summary(overlap: Sequence[Mapping], daemon: Sequence[Mapping], naive: Sequence[Mapping] | None) -> dict:
    """The section upload_overlap of results.json from the runs of each side: medians, and the
    ratios of each overlap run (release over its own test and upload thread), medians too."""
    per_run = [ratios(run["release_s"], run["test_s"], run["upload_s"] or 0.0) for run in overlap]
    today = [run["test_s"] + run["push_s"] for run in daemon]
    over_max = [r["release_over_max"] for r in per_run if r["release_over_max"] is not None]
    tail = [
        (run["test_s"] + run["push_s"]) / max(run["test_s"], run["upload_s"] or 0.0)
        for run in overlap
        if max(run["test_s"], run["upload_s"] or 0.0) > 0
    ]
    figure = statistics.median(over_max) if over_max else None
    return {
        "overlap": medians(overlap),
        "daemon": medians(daemon),
        "naive": medians(naive) if naive else None,
        "release_over_max": figure,
        "release_over_sum": statistics.median(r["release_over_sum"] for r in per_run) if per_run else None,
        "today_test_plus_upload_s": round(statistics.median(today), 3) if today else None,
        "test_and_push_over_max": round(statistics.median(tail), 3) if tail else None,
        "goal": GOAL,
        "met": figure is not None and figure <= GOAL,
        "runs": {"overlap": list(overlap), "daemon": list(daemon), "naive": list(naive or [])},
    }


def cleanup(client: docker.DockerClient, repos: Sequence[str]) -> None:
    """The bench's own local tags and registry manifests (best effort: a registry that refuses
    deletes keeps them, unreferenced once its garbage collection runs)."""
    pipeline.remove_images(client, *repos)
    for name in repos:
        repo = RegistryRepository.parse(name)
        try:
            digests = {repo.digest(tag) for tag in repo.tags()}
            for digest in filter(None, digests):
                repo.delete(digest)
        except Exception as exc:  # noqa: BLE001 - cleanup: the figures are already measured
            print(f"(could not delete the manifests of {name}: {exc})", flush=True)


def measure(
    client: docker.DockerClient,
    weights_bytes: int = WEIGHTS,
    repeat: int = 3,
    run_id: str = "run",
    models: int = MODELS,
    naive: bool = True,
) -> dict:
    """The one-model change with `weights_bytes` of new weights, released `repeat` times by each
    side (overlap, daemon and, with `naive`, the naive pipeline)."""
    base = f"{pipeline.REGISTRY}/bench-{run_id}/upload"
    repos = {"overlap": f"{base}-overlap", "daemon": f"{base}-daemon", "naive": f"{base}-naive"}
    changed = "model_0000"
    flags = {"overlap": (), "daemon": ("--upload-during-tests", "false")}
    runs: dict[str, list[dict]] = {"overlap": [], "daemon": [], "naive": []}
    tmp = tempfile.mkdtemp(prefix="bench-upload-")
    try:
        roots = {side: Path(tmp) / side / "work" for side in repos if side != "naive" or naive}
        for root in roots.values():
            checkout(root, models)
        for side in SIDES:  # the previous release, warm
            pipeline.our_release(roots[side], repos[side], flags=flags[side])
        if naive:
            pipeline.naive_release(client, roots["naive"], repos["naive"], "r0", changed)
        for round_ in range(1, repeat + 1):
            for side in SIDES:
                change(roots[side], changed, round_, weights_bytes)
                elapsed, report = pipeline.our_release(roots[side], repos[side], flags=flags[side])
                figures = release_figures(elapsed, report)
                version, previous = report["version"], report["steps"]["changed"]["previous_version"]
                figures["uploaded_bytes"] = pipeline.new_bytes(RegistryRepository.parse(repos[side]), version, previous)
                runs[side].append(figures)
                print(
                    f"upload overlap, {side}: release {elapsed:.2f} s, test {figures['test_s']:.2f} s, "
                    f"push {figures['push_s']:.2f} s, upload thread {figures['upload_s']} s, "
                    f"pushed by {figures['pushed_by']}",
                    flush=True,
                )
            if naive:
                change(roots["naive"], changed, round_, weights_bytes)
                phases = pipeline.naive_phases(client, roots["naive"], repos["naive"], f"r{round_}", changed)
                runs["naive"].append(
                    {
                        "release_s": round(sum(phases.values()), 3),
                        "build_s": round(phases["build"], 3),
                        "serve+check_s": round(phases["serve+check"], 3),
                        "push_s": round(phases["push"], 3),
                        "uploaded_bytes": pipeline.new_bytes(
                            RegistryRepository.parse(repos["naive"]), f"r{round_}", f"r{round_ - 1}"
                        ),
                    }
                )
    finally:
        cleanup(client, list(repos.values()))
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "models": models,
        "new_weights_bytes": weights_bytes,
        "repeat": repeat,
        **summary(runs["overlap"], runs["daemon"], runs["naive"] if naive else None),
    }
