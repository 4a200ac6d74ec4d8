"""Release time and uploaded bytes against the number of models, and the first release of each size.

Repositories of N tiny models (the add-one model, no weights). The first release of each is
timed with its test waves, the server's peak memory and the image's layer count. Then one model
changes: its version folder gets new weights of W bytes, so the change is about W, and the
bytes a release uploads can be set against it. Both pipelines start warm (previous release in
the registry). The naive pipeline loads every model in one server; above `naive_max` models it
is not run, and the figures say why, estimated from the largest naive server that was run.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import docker

from bench import pipeline
from bench.generate import generate_repository, git
from bench.rebuild import naive_build
from triton_release.registry.client import RegistryRepository

CHANGED = "model_0000"
GIB = 1 << 30


def first_release(seconds: float, report: dict, client: docker.DockerClient, image: str) -> dict:
    """A first release's figures, from its report and its pushed image."""
    test = report["steps"]["test"]
    waves = test.get("waves", [])
    return {
        "n_models": len(report["changed_models"]),
        "release_s": round(seconds, 3),
        "test_s": test.get("seconds"),
        "waves": len(waves),
        "largest_wave": max((len(w["loaded"]) for w in waves), default=0),
        "peak_memory_bytes": test.get("peak_memory_bytes"),
        "release_layers": len(report["steps"]["build"]["layers"]),
        "image_layers": len(client.images.get(image).attrs["RootFS"]["Layers"]),
        "seconds_by_step": pipeline.step_seconds(report),
    }


def new_repository(root: Path, n_models: int) -> None:
    generate_repository(root / "model_repository", n_models)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "bench@example.com")
    git(root, "config", "user.name", "bench")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"{n_models} models")


def measure_size(
    client: docker.DockerClient, n_models: int, change_bytes: int, repeat: int, run_id: str, naive_repeat: int
) -> dict:
    """The first release of N tiny models, then `repeat` one-model changes released by
    triton-release, the first `naive_repeat` of them by the naive pipeline too (none: 0). The
    naive pipeline's previous release is built and pushed only: nothing is measured there."""
    ours_repo, naive_repo = (
        f"{pipeline.REGISTRY}/bench-{run_id}/scale-ours-{n_models}",
        f"{pipeline.REGISTRY}/bench-{run_id}/scale-naive-{n_models}",
    )
    ours, naive_registry = RegistryRepository.parse(ours_repo), RegistryRepository.parse(naive_repo)
    times: dict[str, list[float]] = {"triton_release": [], "naive": []}
    uploaded: dict[str, list[int]] = {"triton_release": [], "naive": []}
    changed_version: list[int] = []
    server: list[pipeline.ServerLoad] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "work"
            new_repository(root, n_models)
            seconds, report = pipeline.our_release(root, ours_repo)
            # the release keeps its build under REPO:candidate (REPO:X.Y.Z is only in the registry)
            first = first_release(seconds, report, client, report["steps"]["tidy"]["kept"])
            print(
                f"  first release of {n_models} models: {seconds:.1f} s, {first['waves']} waves, peak memory "
                f"{(first['peak_memory_bytes'] or 0) / GIB:.2f} GiB, {first['image_layers']} image layers",
                flush=True,
            )
            if naive_repeat:
                naive_build(client, root / "model_repository", f"{naive_repo}:r0")
                pipeline.docker_push(client, naive_repo, "r0")
            for round_ in range(1, repeat + 1):
                pipeline.change_one_model(root, CHANGED, round_, change_bytes)
                if round_ <= naive_repeat:
                    times["naive"].append(
                        pipeline.naive_release(
                            client, root, naive_repo, f"r{round_}", CHANGED, measured=server if round_ == 1 else None
                        )
                    )
                    uploaded["naive"].append(pipeline.new_bytes(naive_registry, f"r{round_}", f"r{round_ - 1}"))
                seconds, report = pipeline.our_release(root, ours_repo)
                times["triton_release"].append(seconds)
                steps = pipeline.step_seconds(report)
                uploaded["triton_release"].append(
                    pipeline.new_bytes(ours, report["version"], report["steps"]["changed"]["previous_version"])
                )
                bump = report["steps"]["bump"]["bumps"][0]
                changed_version.append(pipeline.folder_bytes(root / "model_repository" / CHANGED / str(bump["to"])))
    finally:
        pipeline.remove_images(client, ours_repo, naive_repo)
    return {
        "n_models": n_models,
        "times": times,
        "uploaded": uploaded,
        "changed_version": changed_version,
        "first_release": first,
        "naive_server": server[0] if server else None,
        "last_steps": steps,
    }


def machine_memory() -> int | None:
    try:
        found = re.search(r"^MemTotal:\s*(\d+)\s*kB", Path("/proc/meminfo").read_text(), re.M)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def skipped_because(n_models: int, naive_max: int, server: pipeline.ServerLoad | None) -> str:
    """Why the naive pipeline was not run at `n_models`, with what its one server would need."""
    why = f"not run above --naive-max {naive_max} models: every model is loaded in one server"
    if server is None or not server.memory_bytes:
        return why
    memory = server.memory_bytes / server.models * n_models
    why += (
        f"; at {server.models} models it held {server.memory_bytes / GIB:.1f} GiB"
        + (f" and {server.processes} processes" if server.processes else "")
        + f", so about {memory / GIB:.0f} GiB"
    )
    if server.processes:
        why += f" and {server.processes / server.models * n_models:,.0f} processes"
    why += f" at {n_models}"
    total = machine_memory()
    if total:
        why += f", on a machine of {total / GIB:.0f} GiB and {os.cpu_count()} cores"
    return why


def measure(
    client: docker.DockerClient,
    sizes: list[int],
    change_bytes: int,
    repeat: int,
    naive_max: int,
    naive_repeat: int = 1,
    run_id: str | None = None,
) -> dict:
    """The scaling figures at each N of `sizes`, ratios against the goals, and each first release."""
    run_id = run_id or time.strftime("%Y%m%d%H%M%S")
    by_size, server = {}, None
    for n in sorted(sizes):
        m = by_size[n] = measure_size(client, n, change_bytes, repeat, run_id, naive_repeat if n <= naive_max else 0)
        server = m["naive_server"] or server
        naive = f"naive {statistics.median(m['times']['naive']):.2f} s" if m["times"]["naive"] else "naive not run"
        print(
            f"release of a one-model change, {n} tiny models: triton-release "
            f"{statistics.median(m['times']['triton_release']):.2f} s, {naive}",
            flush=True,
        )
    figures: dict = {
        "change_bytes": change_bytes,
        "repeat": repeat,
        "naive_repeat": naive_repeat,
        "release_s": {},
        "naive_release_s": {},
        "uploaded_bytes": {},
        "first_release": {},
        "naive_skipped": {},
        "naive_server": {},
        "seconds_by_step": {},
        "runs_s": {},
    }
    for n, m in by_size.items():
        key = str(n)
        ours_time = statistics.median(m["times"]["triton_release"])
        figures["release_s"][key] = round(ours_time, 3)
        naive_times = m["times"]["naive"]
        figures["naive_release_s"][key] = round(statistics.median(naive_times), 3) if naive_times else None
        changed = statistics.median(m["changed_version"])
        ours_up = statistics.median(m["uploaded"]["triton_release"])
        naive_up = statistics.median(m["uploaded"]["naive"]) if m["uploaded"]["naive"] else None
        figures["uploaded_bytes"][key] = {
            "triton_release": int(ours_up),
            "naive": int(naive_up) if naive_up is not None else None,
            "changed_version": int(changed),
            "ratio_to_changed": round(ours_up / changed, 3) if changed else None,
        }
        figures["first_release"][key] = m["first_release"]
        figures["runs_s"][key] = {k: [round(t, 3) for t in v] for k, v in m["times"].items()}
        figures["seconds_by_step"][key] = m["last_steps"]  # triton-release's last one-model change
        if m["naive_server"] is not None:
            s = m["naive_server"]
            figures["naive_server"][key] = {"memory_bytes": s.memory_bytes, "processes": s.processes}
        elif n > naive_max:
            figures["naive_skipped"][key] = skipped_because(n, naive_max, server)
        elif not m["times"]["naive"]:
            figures["naive_skipped"][key] = "not run: --naive-repeat 0"
    figures["goals"] = goals(figures)
    return figures


def goals(figures: dict) -> dict:
    """The issue's goals as ratios: the largest N's release time over the smallest's (<= 1.5),
    and uploaded over changed at every N (<= 1.1)."""
    sizes = sorted(figures["release_s"], key=int)
    small, large = sizes[0], sizes[-1]
    time_ratio = figures["release_s"][large] / figures["release_s"][small]
    worst = max((u["ratio_to_changed"] or 0.0) for u in figures["uploaded_bytes"].values())
    return {
        "release_time": {
            "of": large,
            "over": small,
            "ratio": round(time_ratio, 3),
            "target": 1.5,
            "met": time_ratio <= 1.5,
        },
        "uploaded_over_changed": {"worst": round(worst, 3), "target": 1.1, "met": worst <= 1.1},
    }
