"""A one-model change, released by triton-release and by the naive pipeline, side by side.

The naive pipeline is what a team scripts by hand: `docker build` of the whole model
repository with one COPY, tritonserver with every model loaded, the changed model's golden
cases, `docker push`. Both start warm: base image present, previous release in the registry.
Uploaded bytes are read from the registry: the layers of the new manifest that the previous
release's manifest did not have.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker

from bench.generate import MODEL_PY, generate_repository, git
from bench.rebuild import BASE_IMAGE, naive_build
from triton_release.models import golden, inference
from triton_release.registry.rollback import rollback
from triton_release.registry.client import RegistryRepository
from triton_release.models.repository import Repository
from triton_release.image.server import TritonServer

REGISTRY = "127.0.0.1:5000"


def docker_push(client: docker.DockerClient, repo: str, tag: str) -> None:
    for event in client.api.push(repo, tag=tag, stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(f"docker push {repo}:{tag}: {event['error']}")


def naive_release(client: docker.DockerClient, root: Path, repo: str, tag: str, changed: str) -> float:
    start = time.perf_counter()
    image = f"{repo}:{tag}"
    naive_build(client, root / "model_repository", image)
    models = Repository.load(root / "model_repository")
    with TritonServer(image, {m: None for m in models.models}, all_models=True, client=client) as server:
        for path in models[changed].golden_cases:
            case, _ = golden.load_case(path, changed)
            assert inference.run_case(case, server.http_url, server.grpc_url).passed
    docker_push(client, repo, tag)
    return time.perf_counter() - start


def our_release(root: Path, repo: str) -> tuple[float, dict]:
    report = root.parent / f"report-{uuid.uuid4().hex[:6]}.json"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "triton_release", "release", "--to", repo, "--base-image", BASE_IMAGE,
                           "--commit", "--report", str(report)], cwd=root, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"triton-release release failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed, json.loads(report.read_text())


def new_bytes(repo: RegistryRepository, tag: str, previous: str) -> int:
    before = {layer["digest"] for layer in repo.manifest(previous).layers}
    return sum(layer["size"] for layer in repo.manifest(tag).layers if layer["digest"] not in before)


def change_one_model(root: Path, model: str, round_: int, weights_bytes: int) -> None:
    """Edit the model's newest version (new code and new weights), as a data scientist would."""
    folder = root / "model_repository" / model
    newest = max(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    (folder / str(newest) / "model.py").write_text(MODEL_PY.format(offset=1) + f"# change {round_}\n")
    if weights_bytes:
        (folder / str(newest) / "weights.bin").write_bytes(os.urandom(weights_bytes))
    git(root, "commit", "-q", "-am", f"{model}: change {round_}")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure_size(client: docker.DockerClient, n_models: int, weights_bytes: int, repeat: int, run_id: str) -> dict:
    """Median release time and uploaded bytes of a one-model change at N models, both pipelines."""
    ours_repo, naive_repo = f"{REGISTRY}/bench-{run_id}/ours-{n_models}", f"{REGISTRY}/bench-{run_id}/naive-{n_models}"
    changed = "model_0000"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "work"
        generate_repository(root / "model_repository", n_models, weights_bytes)
        git(root, "init", "-q", "-b", "main")
        git(root, "config", "user.email", "bench@example.com")
        git(root, "config", "user.name", "bench")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "models")
        our_release(root, ours_repo)  # the previous release, warm
        naive_release(client, root, naive_repo, "r0", changed)
        times = {"triton_release": [], "naive": []}
        uploaded = {"triton_release": [], "naive": []}
        changed_version: list[int] = []
        ours = RegistryRepository.parse(ours_repo)
        naive = RegistryRepository.parse(naive_repo)
        for round_ in range(1, repeat + 1):
            change_one_model(root, changed, round_, weights_bytes)
            times["naive"].append(naive_release(client, root, naive_repo, f"r{round_}", changed))
            uploaded["naive"].append(new_bytes(naive, f"r{round_}", f"r{round_ - 1}"))
            elapsed, report = our_release(root, ours_repo)
            times["triton_release"].append(elapsed)
            version, previous = report["version"], report["steps"]["changed"]["previous_version"]
            uploaded["triton_release"].append(new_bytes(ours, version, previous))
            bump = report["steps"]["bump"]["bumps"][0]
            changed_version.append(folder_bytes(root / "model_repository" / changed / str(bump["to"])))
        last_version = version
    return {"n_models": n_models, "times": times, "uploaded": uploaded, "changed_version": changed_version,
            "ours_repo": ours_repo, "naive_repo": naive_repo, "last_version": last_version,
            "first_version": "1.0.0"}


def fresh_pull(repo: RegistryRepository, tag: str) -> int:
    """What `docker pull` on a fresh runner downloads: every blob of the image (not unpacked)."""
    manifest = repo.manifest(tag)
    total = 0
    for digest in [manifest.config_digest, *(layer["digest"] for layer in manifest.layers)]:
        answer = repo._request("GET", f"blobs/{digest}", stream=True)
        for chunk in answer.iter_content(1 << 20):
            total += len(chunk)
    return total


def rollback_figures(client: docker.DockerClient, ours_repo: str, naive_repo: str, to_version: str,
                     naive_tag: str, repeat: int) -> dict:
    """Retag through the registry vs docker pull + tag + push of the same release. The pull is
    timed as a fresh runner's download of every blob (a lower bound: nothing is unpacked)."""
    ours, naive = RegistryRepository.parse(ours_repo), RegistryRepository.parse(naive_repo)
    retag, pull_tag_push = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        rollback(ours, to_version, "latest")
        retag.append(time.perf_counter() - start)
        start = time.perf_counter()
        fresh_pull(naive, naive_tag)
        client.images.get(f"{naive_repo}:{naive_tag}").tag(naive_repo, "latest")
        docker_push(client, naive_repo, "latest")
        pull_tag_push.append(time.perf_counter() - start)
    r, n = statistics.median(retag), statistics.median(pull_tag_push)
    return {"retag": round(r, 3), "pull_tag_push": round(n, 3), "ratio": round(r / n, 4)}
