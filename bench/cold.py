"""`python -m bench.cold` (`make bench`): the first release on a cold runner, against the naive
pipeline on the same cold daemon. Merges its figures into bench/results.json under `cold_runner`.

A cold runner holds no image: a fresh GitHub-hosted runner pulls NVIDIA's base from NGC before
anything is built. Here a second Docker daemon, with an empty data root and a bridge of its own,
started for each pipeline and removed after it, pulls the stack's stand-in base from the local
registry (pushed there under a bench name). On it:
- triton-release's first release of the example model repository (model_repository/), with an
  empty cache (TRITON_RELEASE_CACHE in a fresh folder): the base's pull starts as the release
  starts, beside the bump and the export, and the step `pull` is the wait for it;
- the naive pipeline: `docker pull` of the base, `docker build` with one COPY, tritonserver with
  every model and every model's golden cases, `docker push`.

The pull rate is the stand-in's size on the daemon (unpacked) over the mean of its two pulls (the
naive pipeline's `docker pull`, the release's background pull); the figures for NVIDIA's base scale that pull to `NGC_BASE_BYTES` at the same rate, and keep
the rest. On this machine the registry is local: the rate is the daemon's unpacking, not a network's,
so the scaled figure is a floor for a runner that downloads from NGC. Needs root (a second dockerd
and a bridge) and the local stack (`make stack`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker

from bench.pipeline import REGISTRY, action_env, docker_push, step_seconds
from bench.rebuild import BASE_IMAGE, docker_build
from bench.revision import revision
from triton_release.models import golden, inference
from triton_release.models.repository import Repository
from triton_release.registry.sizes import pull_size
from triton_release.server.container import TritonServer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "model_repository"
STANDIN = f"{REGISTRY}/triton-release-bench/cold-base:24.10-py3"  # the stack's base, in the registry
NGC_BASE = "nvcr.io/nvidia/tritonserver:24.06-py3"
NGC_BASE_BYTES = 15.5e9  # its size, as docs/troubleshooting.md gives it ("about 15.5 GB")
BRIDGE, BRIDGE_ADDRESS = "trcold0", "172.31.254.1/24"  # the cold daemon's own bridge


def push_standin() -> None:
    """The stack's base under STANDIN in the registry; the tag made for the push removed after it."""
    client = docker.from_env(timeout=600)
    client.images.get(BASE_IMAGE).tag(STANDIN)
    try:
        docker_push(client, *STANDIN.rsplit(":", 1))
    finally:
        client.images.remove(STANDIN)  # the tag only: the stack's image stays


@contextlib.contextmanager
def cold_daemon(folder: Path) -> Iterator[str]:
    """A Docker daemon with an empty data root in `folder`, on a bridge of its own (no iptables:
    the stack's daemon owns them; published ports go through docker-proxy). Its DOCKER_HOST; the
    daemon stopped, its bridge and its data removed, as the block ends."""
    if os.geteuid() != 0:
        raise SystemExit("bench.cold starts a second dockerd and a bridge: run it as root (`sudo make bench`)")
    socket, pidfile = folder / "docker.sock", folder / "dockerd.pid"
    subprocess.run(["ip", "link", "add", "name", BRIDGE, "type", "bridge"], check=True)
    daemon = None
    try:
        subprocess.run(["ip", "addr", "add", BRIDGE_ADDRESS, "dev", BRIDGE], check=True)
        subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
        with open(folder / "dockerd.log", "ab") as log:
            daemon = subprocess.Popen(
                [
                    "dockerd",
                    "--data-root",
                    str(folder / "data"),
                    "--exec-root",
                    str(folder / "exec"),
                    "-H",
                    f"unix://{socket}",
                    "--pidfile",
                    str(pidfile),
                    "--bridge",
                    BRIDGE,
                    "--iptables=false",
                    "--ip-masq=false",
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        host = f"unix://{socket}"
        deadline = time.monotonic() + 60
        while True:
            try:
                docker.DockerClient(base_url=host, timeout=5).ping()
                break
            except Exception:
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise SystemExit(f"the cold dockerd did not start: see {folder / 'dockerd.log'}") from None
                time.sleep(0.5)
        yield host
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        subprocess.run(["ip", "link", "del", BRIDGE], check=False)
        shutil.rmtree(folder / "data", ignore_errors=True)


def checkout(folder: Path) -> Path:
    """A git repository of the example model repository, one commit."""
    root = folder / "work"
    shutil.copytree(EXAMPLE, root / "model_repository")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "the example models"],
    ):
        subprocess.run(["git", "-C", str(root), *args], check=True)
    return root


def ours(host: str, folder: Path, repo: str) -> dict:
    """triton-release's first release of the example on the cold daemon: seconds, step by step."""
    root = checkout(folder)
    report = folder / "report.json"
    env = {**action_env(), "DOCKER_HOST": host, "TRITON_RELEASE_CACHE": str(folder / "cache")}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "triton_release", "release", "--to", repo, "--base-image", STANDIN, "--commit"]
        + ["--report", str(report)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"triton-release release failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    found = json.loads(report.read_text())
    steps = step_seconds(found)
    pulled = found["steps"]["pull"]
    return {
        "total_s": round(elapsed, 3),
        "steps": {name: round(seconds, 3) for name, seconds in steps.items()},
        "outside_steps_s": round(max(0.0, elapsed - sum(steps.values())), 3),
        "pull_s": pulled["pull_seconds"],  # the pull, from its start beside the first steps to its end
        "pull_waited_s": pulled["seconds"],  # the part of it the release waited for
    }


def naive(host: str, repo: str) -> dict:
    """docker pull, docker build (one COPY), every model served and every golden case, docker push."""
    client = docker.DockerClient(base_url=host, timeout=600)
    image = f"{repo}:1.0.0"
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    for event in client.api.pull(STANDIN.rsplit(":", 1)[0], tag=STANDIN.rsplit(":", 1)[1], stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(f"docker pull {STANDIN}: {event['error']}")
    seconds["pull"] = time.perf_counter() - start
    unpacked = client.images.get(STANDIN).attrs["Size"]
    start = time.perf_counter()
    docker_build(client, f"FROM {STANDIN}\nCOPY model_repository /models\n", {"model_repository": EXAMPLE}, image)
    seconds["build"] = time.perf_counter() - start
    start = time.perf_counter()
    models = Repository.load(EXAMPLE)
    with TritonServer(image, {m: None for m in models.models}, all_models=True, client=client, pids=None) as server:
        for model in models:
            for path in model.golden_cases:
                case, _ = golden.load_case(path, model.name)
                result = inference.run_case(case, server.http_url, server.grpc_url)
                assert result.passed, result.message
    seconds["serve+check"] = time.perf_counter() - start
    start = time.perf_counter()
    docker_push(client, repo, "1.0.0")
    seconds["push"] = time.perf_counter() - start
    return {
        "total_s": round(sum(seconds.values()), 3),
        "steps": {name: round(value, 3) for name, value in seconds.items()},
        "unpacked_bytes": unpacked,
    }


def pull_rate(unpacked: int, pulls: list[float]) -> float:
    """Bytes per second of the base's pulls (the same image, once by each pipeline): its unpacked
    size over their mean time."""
    return unpacked * len(pulls) / sum(pulls)


def scaled(ours_: dict, naive_: dict, rate: float) -> dict:
    """Both pipelines with a base of NGC_BASE_BYTES pulled at `rate`: the pull scaled, the rest as
    measured; ours waits for what of the scaled pull its steps before the wait do not cover."""
    pull = NGC_BASE_BYTES / rate
    beside = ours_["pull_s"] - ours_["pull_waited_s"]  # what ran while the base came down
    waited = max(0.0, pull - beside)
    return {
        "base": NGC_BASE,
        "base_bytes": int(NGC_BASE_BYTES),
        "pull_s": round(pull, 1),
        "triton_release_s": round(ours_["total_s"] - ours_["pull_waited_s"] + waited, 1),
        "naive_s": round(naive_["total_s"] - naive_["steps"]["pull"] + pull, 1),
    }


def measure(run_id: str, measured: str) -> dict:
    push_standin()
    compressed = pull_size(STANDIN, os.environ)
    with tempfile.TemporaryDirectory(prefix="triton-release-cold-") as tmp:
        folder = Path(tmp)
        (folder / "naive").mkdir()
        (folder / "ours").mkdir()
        with cold_daemon(folder / "naive") as host:
            naive_ = naive(host, f"{REGISTRY}/bench-cold-{run_id}/naive")
        with cold_daemon(folder / "ours") as host:
            ours_ = ours(host, folder / "ours", f"{REGISTRY}/bench-cold-{run_id}/ours")
    rate = pull_rate(naive_["unpacked_bytes"], [naive_["steps"]["pull"], ours_["pull_s"]])
    return {
        "revision": measured,
        "date": time.strftime("%Y-%m-%d"),
        "example_models": len(Repository.load(EXAMPLE).models),
        "base": {"image": STANDIN, "compressed_bytes": compressed, "unpacked_bytes": naive_["unpacked_bytes"]},
        "pull_rate_mb_s": round(rate / 1e6, 1),
        "triton_release": ours_,
        "naive": naive_,
        "ratio": round(ours_["total_s"] / naive_["total_s"], 3),
        "scaled": scaled(ours_, naive_, rate),
    }


def table(c: dict) -> str:
    """Markdown: both pipelines step by step, the pull rate, and the scaled figures."""
    base, ours_, naive_, big = c["base"], c["triton_release"], c["naive"], c["scaled"]
    rows = [
        f"\ncold runner ({c['date']}, triton-release {c['revision']}): the first release of the example "
        f"({c['example_models']} models) on a daemon that holds no image; the base {base['unpacked_bytes'] / 1e6:.0f} MB "
        f"({base['compressed_bytes'] / 1e6:.0f} MB compressed), pulled at {c['pull_rate_mb_s']} MB/s\n",
        "| step | triton-release (s) | naive (s) |",
        "| --- | ---: | ---: |",
        *[f"| {name} | {seconds:.2f} | |" for name, seconds in ours_["steps"].items()],
        *[f"| {name} | | {seconds:.2f} |" for name, seconds in naive_["steps"].items()],
        f"| total | {ours_['total_s']:.2f} | {naive_['total_s']:.2f} |",
        "",
        f"the base's pull: {ours_['pull_s']:.2f} s, of which the release waited {ours_['pull_waited_s']:.2f} s",
        f"scaled to {big['base']} ({big['base_bytes'] / 1e9:.1f} GB) at that rate: pull {big['pull_s']:.0f} s; "
        f"triton-release {big['triton_release_s']:.0f} s, naive {big['naive_s']:.0f} s",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold")
    parser.add_argument(
        "--json", metavar="FILE", default="bench/results.json", help="the figures file `cold_runner` is merged into"
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="measure a tree whose src/, bench/ or pyproject.toml differ from HEAD (recorded as <sha>+modified)",
    )
    args = parser.parse_args(argv)
    measured = revision(allow_dirty=args.allow_dirty)  # before anything is measured: a dirty tree stops here
    action_env()  # perf_analyzer present and the modules compiled, before anything is measured
    figures = measure(time.strftime("%Y%m%d%H%M%S"), measured)
    print(table(figures), flush=True)
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.exists() else {}
    results["cold_runner"] = figures
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nfigures: {args.json} (cold_runner)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
