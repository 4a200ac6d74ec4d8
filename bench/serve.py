"""Server readiness (one changed model vs every model) and golden throughput (HTTP, gRPC)."""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import docker

from bench.generate import generate_repository
from triton_release.image.build import build_image
from triton_release.models import golden, inference
from triton_release.models.repository import Repository
from triton_release.server.container import TritonServer

BASE_IMAGE = "local/tritonserver:24.10-py3"
TAG = "triton-release-bench/serve:latest"


def ready_time(client, models: dict, all_models: bool) -> float:
    start = time.perf_counter()
    with TritonServer(TAG, models, all_models=all_models, load_timeout=300, client=client):
        return time.perf_counter() - start


def throughput(case: golden.GoldenCase, server: TritonServer, cases: int, workers: int) -> float:
    def one(_):
        result = inference.run_case(case, server.http_url, server.grpc_url)
        assert result.passed, result.message

    start = time.perf_counter()
    if workers == 1:
        for i in range(cases):
            one(i)
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, range(cases)))
    return cases / (time.perf_counter() - start)


def measure(n_models: int, weights_bytes: int, repeat: int, cases: int = 200, workers: int = 8) -> dict:
    client = docker.from_env(timeout=600)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Repository.load(generate_repository(Path(tmp) / "model_repository", n_models, weights_bytes))
        build_image(repo, BASE_IMAGE, TAG, client=client)
        names = sorted(repo.models)
        changed = [ready_time(client, {names[0]: 1}, False) for _ in range(repeat)]
        every = [ready_time(client, {n: 1 for n in names}, True) for _ in range(repeat)]
        case, _ = golden.load_case(repo[names[0]].golden_cases[0], names[0])
    figures = {
        "n_models": n_models,
        "ready_s": {
            "changed_only": round(statistics.median(changed), 3),
            "all": round(statistics.median(every), 3),
            "ratio": round(statistics.median(changed) / statistics.median(every), 3),
        },
    }
    with TritonServer(TAG, {names[0]: 1}, client=client) as server:
        throughput(case, server, 20, 1)  # warm up
        grpc = replace(case, protocol="grpc")
        figures["golden_cases_per_s"] = {
            "http": round(throughput(case, server, cases, 1), 1),
            "http_concurrent": round(throughput(case, server, cases, workers), 1),
            "grpc": round(throughput(grpc, server, cases, 1), 1),
            "grpc_concurrent": round(throughput(grpc, server, cases, workers), 1),
        }
    client.images.remove(TAG, force=True)
    return figures


def table(figures: dict) -> str:
    ready, rate = figures["ready_s"], figures["golden_cases_per_s"]
    return "\n".join(
        [
            f"\nServer ready, {figures['n_models']}-model repository (median):\n",
            "| loaded | ready (s) |",
            "| --- | ---: |",
            f"| the changed model (`--load-model`) | {ready['changed_only']:.2f} |",
            f"| every model (`--load-model=*`) | {ready['all']:.2f} |",
            f"| ratio | {ready['ratio']:.2f} |",
            "\nGolden cases per second (one case per request, a new client per case, as `test` sends them):\n",
            "| protocol | sequential | 8 threads |",
            "| --- | ---: | ---: |",
            f"| HTTP | {rate['http']:.0f} | {rate['http_concurrent']:.0f} |",
            f"| gRPC | {rate['grpc']:.0f} | {rate['grpc_concurrent']:.0f} |",
        ]
    )
