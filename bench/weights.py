"""`python -m bench.weights`: new weights, released near the disk's and the network's speed (#50 item 1).

A repository of 20 small models, released once by triton-release and once by the naive pipeline,
each from its own checkout to its own registry repository (warm: the previous release in the
registry, the base present). Then one model's newest version gets W bytes of new, random
(incompressible, as trained weights are) weights, written a chunk at a time and committed, and the
change is released both ways, side by side in one run:

- triton-release: `release --commit` as the action runs it (bench/pipeline.py), its wall time, its
  steps' seconds, and its peak memory (the largest resident set of its process and of the commands
  it waited for, from wait4);
- naive: the newest version folder copied to the next number, `docker build` with one COPY,
  tritonserver with every model and the changed model's golden cases, `docker push`, then
  `git add` and `git commit` of the new folder (the repository's own git settings);
- the physical floor: the new bytes read and hashed (sha256) once, plus uploaded once to the
  registry as one blob (a streamed PUT), on the same machine in the same run;
- the daemon's own copy, apart from the floor: the new bytes written into a one-layer tar as the
  build writes its layers, and that layer loaded into the daemon on the base (what any release
  whose image the Docker daemon runs pays on top of the floor).

The figures: release / naive (goal <= 0.3) and release / floor (goal <= 1.5), for W = 512 MiB
and, with --large, 4 GiB; the peak memory (goal < 1 GiB). Merged into bench/results.json under
`new_weights`. Needs the local stack (`make stack`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

from bench import pipeline, upload
from bench.generate import generate_repository, git
from bench.peak import measured
from bench.rebuild import BASE_IMAGE
from bench.revision import revision
from triton_release.history.commit import STORE_BIG
from triton_release.history.git import GIT_SETTINGS
from triton_release.image.assemble import image_config, load
from triton_release.image.layers import write_layer_tar
from triton_release.registry.client import RegistryRepository

MIB = 1024 * 1024
MODELS = 20
SIZES = (512 * MIB,)
# 4 GiB and 1 MiB: a file of exactly 4 GiB is one whose size git's index keeps as 0 (it holds 32
# bits), so every `git status` hashes it again; real weights are never exactly a multiple of 2^32.
LARGE = 4097 * MIB
QUICK = 1 * MIB
GOAL_NAIVE = 0.3  # release <= this x naive
GOAL_FLOOR = 1.5  # release <= this x the physical floor
GOAL_PEAK = 1024 * MIB  # the tool's peak resident memory
CHANGED = "model_0000"
STORED = (*GIT_SETTINGS, *STORE_BIG)


def checkout(root: Path, models: int) -> None:
    generate_repository(root / "model_repository", models, 4096)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "bench@example.com")
    git(root, "config", "user.name", "bench")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "models")


def newest(root: Path, model: str) -> Path:
    folder = root / "model_repository" / model
    return folder / str(max(int(p.name) for p in folder.iterdir() if p.name.isdigit()))


def change(root: Path, size: int) -> None:
    """The changed model's newest version gets `size` bytes of new random weights, committed."""
    upload.write_random(newest(root, CHANGED) / "weights.bin", size)
    git(root, *STORED, "add", "-A")  # set-up, not measured: stored undeflated, as the tool stores it
    git(root, *STORED, "commit", "-q", "-m", f"{CHANGED}: {size} bytes of new weights")


def release(root: Path, repo: str) -> tuple[float, dict, int]:
    """triton-release release --commit, as the action runs it: its seconds, its report, and its
    peak resident memory in bytes (its own and its children's, the largest: `measured`)."""
    report = root.parent / f"report-{uuid.uuid4().hex[:6]}.json"
    command = [
        sys.executable,
        "-m",
        "triton_release",
        "release",
        "--to",
        repo,
        "--base-image",
        BASE_IMAGE,
        "--commit",
        "--report",
        str(report),
    ]
    elapsed, code, out, peak = measured(command, root, pipeline.action_env())
    if code != 0:
        raise RuntimeError(f"triton-release release failed:\n{out.decode(errors='replace')[-3000:]}")
    return elapsed, json.loads(report.read_text()), peak


def naive(client: docker.DockerClient, root: Path, repo: str, tag: str) -> dict[str, float]:
    """The naive pipeline's phases: copy N to N+1, build, serve+check, push, git add/commit."""
    start = time.perf_counter()
    source = newest(root, CHANGED)
    shutil.copytree(source, source.parent / str(int(source.name) + 1))
    copied = time.perf_counter()
    phases = pipeline.naive_phases(client, root, repo, tag, CHANGED)
    done = time.perf_counter()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"release {tag}")
    return {"copy": copied - start, **phases, "git": time.perf_counter() - done}


def floor(weights: Path, repo: RegistryRepository) -> dict[str, float]:
    """The physical floor: the new bytes read and hashed once, and uploaded once (one blob)."""
    start = time.perf_counter()
    with open(weights, "rb") as handle:
        digest = "sha256:" + hashlib.file_digest(handle, "sha256").hexdigest()
    hashed = time.perf_counter()
    url = repo._open_upload()
    url += ("&" if "?" in url else "?") + f"digest={digest.replace(':', '%3A')}"
    with open(weights, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        answer = repo._request_url("PUT", url, data=handle, headers=headers)
    repo._raise_for(answer, f"upload blob {digest} to")
    return {"read_and_hash": hashed - start, "upload": time.perf_counter() - hashed}


def daemon_copy(client: docker.DockerClient, weights: Path) -> dict[str, float]:
    """The daemon's own copy of the new bytes: a one-layer tar of them written as the build writes a
    layer, then loaded into the daemon on the base image as the build loads one (then removed)."""
    base = client.images.get(BASE_IMAGE)
    tag = f"bench-daemon-copy:{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="bench-layer-") as folder:
        tar = Path(folder) / "layer.tar"
        start = time.perf_counter()
        with open(tar, "wb") as out:
            diff_id = "sha256:" + write_layer_tar(out, {"models/m/1/weights.bin": weights})
        written = time.perf_counter()
        diff_ids = [*base.attrs["RootFS"]["Layers"], diff_id]
        try:
            load(client, tag, image_config(base.attrs, diff_ids, {}, None), diff_ids, {diff_id: tar})
            loaded = time.perf_counter()
        finally:
            try:
                client.images.remove(tag, force=True)
            except docker.errors.ImageNotFound:
                pass
    return {"write_tar": written - start, "load": loaded - written}


def timed(steps: dict[str, float]) -> dict:
    """Steps' seconds as recorded: their total and each, to the millisecond."""
    return {"total_s": round(sum(steps.values()), 3), "steps": {k: round(v, 3) for k, v in steps.items()}}


def ratios(release_s: float, naive_s: float, floor_s: float, peak: int) -> dict:
    """The goals' figures from one size's measurements."""
    over_naive = round(release_s / naive_s, 3) if naive_s > 0 else None
    over_floor = round(release_s / floor_s, 3) if floor_s > 0 else None
    return {
        "release_over_naive": over_naive,
        "release_over_floor": over_floor,
        "met": {
            "naive": over_naive is not None and over_naive <= GOAL_NAIVE,
            "floor": over_floor is not None and over_floor <= GOAL_FLOOR,
            "peak_memory": peak < GOAL_PEAK,
        },
    }


def measure_size(client: docker.DockerClient, size: int, models: int, run_id: str) -> dict:
    base = f"{pipeline.REGISTRY}/bench-{run_id}/weights-{size // MIB or 1}"
    repos = {"ours": f"{base}-ours", "naive": f"{base}-naive", "floor": f"{base}-floor"}
    tmp = tempfile.mkdtemp(prefix="bench-weights-")
    try:
        roots = {side: Path(tmp) / side / "work" for side in ("ours", "naive")}
        for root in roots.values():
            checkout(root, models)
        pipeline.our_release(roots["ours"], repos["ours"])  # the previous release, warm
        pipeline.naive_release(client, roots["naive"], repos["naive"], "r0", CHANGED)
        change(roots["ours"], size)
        elapsed, report, peak = release(roots["ours"], repos["ours"])
        weights = newest(roots["ours"], CHANGED) / "weights.bin"  # N+1: the bump put N back as released
        assert weights.stat().st_size == size, weights
        print(f"new weights {size // MIB} MiB, triton-release: {elapsed:.2f} s, peak {peak / MIB:.0f} MiB", flush=True)
        change(roots["naive"], size)
        phases = naive(client, roots["naive"], repos["naive"], "r1")
        print(f"new weights {size // MIB} MiB, naive: {sum(phases.values()):.2f} s", flush=True)
        physical = floor(weights, RegistryRepository.parse(repos["floor"]))
        print(f"new weights {size // MIB} MiB, floor: {sum(physical.values()):.2f} s", flush=True)
        copied = daemon_copy(client, weights)
        print(f"new weights {size // MIB} MiB, the daemon's copy: {sum(copied.values()):.2f} s", flush=True)
    finally:
        upload.cleanup(client, list(repos.values()))
        shutil.rmtree(tmp, ignore_errors=True)
    naive_s, floor_s = sum(phases.values()), sum(physical.values())
    return {
        "bytes": size,
        "triton_release": {
            "release_s": round(elapsed, 3),
            "peak_rss_bytes": peak,
            "steps": pipeline.step_seconds(report),
        },
        "naive": {"release_s": round(naive_s, 3), "steps": {k: round(v, 3) for k, v in phases.items()}},
        "floor": timed(physical),
        "daemon_copy": timed(copied),
        **ratios(elapsed, naive_s, floor_s, peak),
    }


def table(figures: dict) -> str:
    rows = [
        f"\nNew weights in one model of {figures['models']} ({figures['revision']}); goals: release <= "
        f"{GOAL_NAIVE} x naive, <= {GOAL_FLOOR} x the floor, peak memory < {GOAL_PEAK // MIB} MiB\n",
        "| new weights | triton-release (s) | naive (s) | floor (s) | / naive | / floor | peak (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in figures["sizes"]:
        rows.append(
            f"| {size['bytes'] / MIB:.0f} MiB | {size['triton_release']['release_s']:.2f} | "
            f"{size['naive']['release_s']:.2f} | {size['floor']['total_s']:.2f} | {size['release_over_naive']} | "
            f"{size['release_over_floor']} | {size['triton_release']['peak_rss_bytes'] / MIB:.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.weights")
    parser.add_argument("--large", action="store_true", help=f"also {LARGE // MIB} MiB of new weights")
    parser.add_argument("--models", type=int, default=MODELS, help="models in the repository")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK // MIB} MiB only, the figures kept out of bench/")
    parser.add_argument("--json", metavar="FILE", default=None, help="the figures file `new_weights` is merged into")
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="measure a tree whose src/, bench/ or pyproject.toml differ from HEAD (recorded as <sha>+modified)",
    )
    args = parser.parse_args(argv)
    measured = revision(allow_dirty=args.allow_dirty or args.quick)
    json_path = Path(args.json or (".stack/bench-quick/results.json" if args.quick else "bench/results.json"))
    sizes = (QUICK,) if args.quick else (*SIZES, *((LARGE,) if args.large else ()))
    pipeline.action_env()  # perf_analyzer present, before anything is measured
    client = docker.from_env(timeout=600)
    run_id = time.strftime("%Y%m%d%H%M%S")
    figures = {
        "revision": measured,
        "date": time.strftime("%Y-%m-%d"),
        "models": args.models,
        "sizes": [measure_size(client, size, args.models, run_id) for size in sizes],
    }
    print(table(figures), flush=True)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(json_path.read_text()) if json_path.exists() else {}
    results["new_weights"] = figures
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nfigures: {json_path} (new_weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
