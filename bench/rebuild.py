"""Rebuild after a one-model change: triton-release's per-model layers against one COPY.

Both start from the same generated repository on the stand-in base; one model gets a new
version folder, as `bump` makes it (a copy of the highest with its model.py changed); each
image is rebuilt and its layers compared with the previous build's.
"""

from __future__ import annotations

import io
import shutil
import statistics
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO

import docker

from bench.generate import generate_repository
from triton_release import steps

BASE_IMAGE = "local/tritonserver:24.10-py3"
NAIVE_DOCKERFILE = f"FROM {BASE_IMAGE}\nCOPY model_repository /models\n"


def diff_ids(client: docker.DockerClient, tag: str) -> list[str]:
    return client.images.get(tag).attrs["RootFS"]["Layers"]


def docker_build(
    client: docker.DockerClient, dockerfile: str, folders: dict[str, Path], tag: str, context: IO[bytes] | None = None
) -> None:
    """`docker build` of a context holding `dockerfile` and `folders` (each under its name there),
    written to `context` (in memory when none is given)."""
    context = io.BytesIO() if context is None else context
    with tarfile.open(fileobj=context, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name, folder in folders.items():
            tar.add(folder, arcname=name)
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, pull=False)


def naive_build(client: docker.DockerClient, root: Path, tag: str) -> None:
    docker_build(client, NAIVE_DOCKERFILE, {"model_repository": root}, tag)


def measure(n_models: int, weights_bytes: int, repeat: int) -> dict:
    client = docker.from_env(timeout=600)
    tags = {"ours": "triton-release-bench/rebuild:ours", "naive": "triton-release-bench/rebuild:naive"}
    figures: dict = {"n_models": n_models, "weights_bytes": weights_bytes}
    with tempfile.TemporaryDirectory() as tmp:
        root = generate_repository(Path(tmp) / "model_repository", n_models, weights_bytes)
        model = root / "model_0000"
        steps.build(root, BASE_IMAGE, tags["ours"])
        naive_build(client, root, tags["naive"])
        times: dict[str, list[float]] = {"ours": [], "naive": []}
        reused: dict[str, list[int]] = {"ours": [], "naive": []}
        layers: dict[str, int] = {}
        for round_ in range(repeat):
            shutil.copytree(model / str(round_ + 1), model / str(round_ + 2))
            changed = model / str(round_ + 2) / "model.py"
            changed.write_text(changed.read_text() + f"\n# change {round_}\n")
            for name in ("ours", "naive"):
                before = set(diff_ids(client, tags[name]))
                start = time.perf_counter()
                if name == "ours":
                    built = steps.build(root, BASE_IMAGE, tags[name])
                    ours = diff_ids(client, tags[name])[-len(built.build.layers) :]
                else:
                    naive_build(client, root, tags[name])
                    ours = diff_ids(client, tags[name])[-1:]
                times[name].append(time.perf_counter() - start)
                reused[name].append(sum(1 for d in ours if d in before))
                layers[name] = len(ours)
        for name in ("ours", "naive"):
            figures[name] = {
                "rebuild_s": round(statistics.median(times[name]), 3),
                "spread_s": round(max(times[name]) - min(times[name]), 3),
                "model_layers": layers[name],
                "reused_layers": reused[name][-1],
                "new_layers": layers[name] - reused[name][-1],
            }
    for tag in tags.values():
        client.images.remove(tag, force=True)
    return figures


def table(figures: dict) -> str:
    rows = [
        f"\nRebuild after a one-model change ({figures['n_models']} models, "
        f"{figures['weights_bytes']} bytes of weights each):\n",
        "| build | median (s) | spread (s) | model layers | reused from the previous build | new |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, label in (("ours", "triton-release"), ("naive", "one COPY")):
        f = figures[name]
        rows.append(
            f"| {label} | {f['rebuild_s']:.2f} | {f['spread_s']:.2f} | {f['model_layers']} | {f['reused_layers']} | {f['new_layers']} |"
        )
    return "\n".join(rows)
