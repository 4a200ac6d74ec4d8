"""A one-model change, released by triton-release and by the naive pipeline, side by side.

The naive pipeline is what a team scripts by hand: `docker build` of the whole model
repository with one COPY, tritonserver with every model loaded, the changed model's golden
cases, `docker push`. Both start warm: base image present, previous release in the registry.
Uploaded bytes are read from the registry: the layers of the new manifest that the previous
release's manifest did not have.
"""

from __future__ import annotations

import compileall
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker

from bench.generate import MODEL_PY, generate_repository, git
from bench.rebuild import BASE_IMAGE, naive_build
from triton_release.models import golden, inference
from triton_release.models.repository import Repository
from triton_release.registry.client import RegistryRepository
from triton_release.registry.rollback import rollback
from triton_release.server.container import TritonServer

REGISTRY = "127.0.0.1:5000"
PERF_ANALYZER = Path(__file__).resolve().parent.parent / ".stack" / "perf_analyzer" / "bin" / "perf_analyzer"
# What every release of the bench runs as: the action's default path. The action's image holds
# perf_analyzer (/opt/perf_analyzer), so a release measured without it would not be the one users run.
DEFAULT_PATH = (
    "releases run as the action runs them: perf_analyzer present (on PATH, as the action's image holds it), "
    "the action's defaults (no max-latency-increase, no measure-latency)"
)


def action_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a bench release runs in: `env` (default os.environ) with `make stack`'s
    perf_analyzer first on PATH, as in the action's image. Missing, the bench stops: its figures
    would be of a path the action never takes."""
    env = dict(os.environ if env is None else env)
    if not PERF_ANALYZER.exists():
        raise SystemExit(f"{PERF_ANALYZER} is missing: `make stack` installs it (the action's image always has one)")
    env["PATH"] = f"{PERF_ANALYZER.parent}{os.pathsep}{env.get('PATH', '')}"
    compiled()
    return env


@functools.cache
def compiled() -> None:
    """The tool's modules compiled to bytecode once, as pip installs them into the action's image.
    A checkout installed editable, on a machine that sets PYTHONDONTWRITEBYTECODE (these do), would
    compile them again at every start of every release measured: about 0.2 s a start."""
    import triton_release

    compileall.compile_dir(Path(triton_release.__file__).parent, quiet=1)


def docker_push(client: docker.DockerClient, repo: str, tag: str) -> None:
    for event in client.api.push(repo, tag=tag, stream=True, decode=True):
        if "error" in event:
            raise RuntimeError(f"docker push {repo}:{tag}: {event['error']}")


@dataclass(frozen=True)
class ServerLoad:
    """What one server with every model loaded held: its memory and its processes (threads)."""

    models: int
    memory_bytes: int | None
    processes: int | None


def server_load(server: TritonServer, models: int) -> ServerLoad:
    processes = None
    try:
        processes = server.container.stats(stream=False).get("pids_stats", {}).get("current")
    except (docker.errors.DockerException, ValueError):
        pass
    return ServerLoad(models, server.sample_memory(), processes)


def serve_and_check(
    client: docker.DockerClient,
    image: str,
    root: Path,
    changed: str,
    load_timeout: float,
    measured: list[ServerLoad] | None = None,
) -> float:
    """tritonserver with every model loaded, no process limit (as `docker run` gives it), and the
    changed model's golden cases; with `measured`, the server's memory and processes appended.
    Returns the seconds that reading those figures took."""
    models = Repository.load(root / "model_repository")
    with TritonServer(
        image, {m: None for m in models.models}, all_models=True, client=client, load_timeout=load_timeout, pids=None
    ) as server:
        for path in models[changed].golden_cases:
            case, _ = golden.load_case(path, changed)
            result = inference.run_case(case, server.http_url, server.grpc_url)
            assert result.passed, result.message
        if measured is None:
            return 0.0
        start = time.perf_counter()
        measured.append(server_load(server, len(models.models)))
        return time.perf_counter() - start


def naive_release(
    client: docker.DockerClient,
    root: Path,
    repo: str,
    tag: str,
    changed: str,
    *,
    load_timeout: float = 900,
    measured: list[ServerLoad] | None = None,
) -> float:
    """Build with one COPY, serve every model, the changed model's cases, docker push. The seconds,
    without the time `measured` (the server's figures) took to read."""
    return sum(naive_phases(client, root, repo, tag, changed, load_timeout=load_timeout, measured=measured).values())


def naive_phases(
    client: docker.DockerClient,
    root: Path,
    repo: str,
    tag: str,
    changed: str,
    *,
    load_timeout: float = 900,
    measured: list[ServerLoad] | None = None,
) -> dict[str, float]:
    """naive_release, the seconds of each of its phases: build, serve+check (the server with every
    model and the changed model's cases, without reading `measured`), push."""
    image = f"{repo}:{tag}"
    start = time.perf_counter()
    naive_build(client, root / "model_repository", image)
    built = time.perf_counter()
    reading = serve_and_check(client, image, root, changed, load_timeout, measured)
    served = time.perf_counter()
    docker_push(client, repo, tag)
    return {"build": built - start, "serve+check": served - built - reading, "push": time.perf_counter() - served}


def our_release(root: Path, repo: str, flags: tuple[str, ...] = ()) -> tuple[float, dict]:
    """triton-release release --commit of the checkout `root` to `repo`, with `flags` added, as the
    action runs it (action_env: perf_analyzer present, no latency setting): its seconds and its report."""
    report = root.parent / f"report-{uuid.uuid4().hex[:6]}.json"
    start = time.perf_counter()
    done = subprocess.run(
        [
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
            *flags,
        ],
        cwd=root,
        env=action_env(),
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"triton-release release failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return elapsed, json.loads(report.read_text())


def step_seconds(report: dict) -> dict[str, float]:
    """Where a release's time went: each step's seconds, from its report."""
    return {
        name: step["seconds"]
        for name, step in report["steps"].items()
        if isinstance(step, dict) and isinstance(step.get("seconds"), (int, float))
    }


OUTSIDE = "outside the steps"  # the command's start-up, settings and report: its wall time less its steps'


def release_steps(report: dict, elapsed: float) -> dict[str, float]:
    """Where a release's time went, finer than step_seconds: the test step split into the phases
    its report gives ("test: load", ...; "test: other" for what they leave of it), and OUTSIDE."""
    steps = step_seconds(report)
    found: dict[str, float] = {}
    for name, seconds in steps.items():
        phases = report["steps"][name].get("phases") or {}
        if not phases:
            found[name] = seconds
            continue
        found.update({f"{name}: {phase}": value for phase, value in phases.items()})
        found[f"{name}: other"] = max(0.0, seconds - sum(phases.values()))
    found[OUTSIDE] = max(0.0, elapsed - sum(steps.values()))
    return found


def median_steps(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each step's median over the runs (in the order the runs name them); the medians need not add
    up to the median of the totals."""
    names = list(dict.fromkeys(name for run in runs for name in run))
    return {name: round(statistics.median(run.get(name, 0.0) for run in runs), 3) for name in names}


def new_layers(repo: RegistryRepository, tag: str, previous: str) -> list[tuple[int, dict]]:
    """(position in the image, layer) of each layer of `tag` that `previous` does not have."""
    before = {layer["digest"] for layer in repo.manifest(previous).layers}
    return [(i, layer) for i, layer in enumerate(repo.manifest(tag).layers) if layer["digest"] not in before]


def new_bytes(repo: RegistryRepository, tag: str, previous: str) -> int:
    return sum(layer["size"] for _, layer in new_layers(repo, tag, previous))


def remove_images(client: docker.DockerClient, *repos: str) -> None:
    """The local tags of the bench's own registry repositories (never anything else)."""
    for repo in repos:
        for image in client.images.list(name=repo):
            for tag in image.tags:
                if tag.rsplit(":", 1)[0] == repo:
                    try:
                        client.images.remove(tag, force=True)
                    except docker.errors.APIError:
                        pass


def change_one_model(root: Path, model: str, round_: int, weights_bytes: int) -> None:
    """Edit the model's newest version (new code and new weights), as a data scientist would."""
    folder = root / "model_repository" / model
    newest = max(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    (folder / str(newest) / "model.py").write_text(MODEL_PY.format(offset=1) + f"# change {round_}\n")
    if weights_bytes:
        (folder / str(newest) / "weights.bin").write_bytes(os.urandom(weights_bytes))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"{model}: change {round_}")


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
        steps: dict[str, list[dict[str, float]]] = {"triton_release": [], "naive": []}
        uploaded = {"triton_release": [], "naive": []}
        changed_version: list[int] = []
        ours = RegistryRepository.parse(ours_repo)
        naive = RegistryRepository.parse(naive_repo)
        for round_ in range(1, repeat + 1):
            change_one_model(root, changed, round_, weights_bytes)
            naive_steps = naive_phases(client, root, naive_repo, f"r{round_}", changed)
            times["naive"].append(sum(naive_steps.values()))
            steps["naive"].append(naive_steps)
            uploaded["naive"].append(new_bytes(naive, f"r{round_}", f"r{round_ - 1}"))
            elapsed, report = our_release(root, ours_repo)
            times["triton_release"].append(elapsed)
            steps["triton_release"].append(release_steps(report, elapsed))
            version, previous = report["version"], report["steps"]["changed"]["previous_version"]
            uploaded["triton_release"].append(new_bytes(ours, version, previous))
            bump = report["steps"]["bump"]["bumps"][0]
            changed_version.append(folder_bytes(root / "model_repository" / changed / str(bump["to"])))
        last_version = version
    return {
        "n_models": n_models,
        "times": times,
        "steps": steps,
        "uploaded": uploaded,
        "changed_version": changed_version,
        "ours_repo": ours_repo,
        "naive_repo": naive_repo,
        "last_version": last_version,
        "first_version": "1.0.0",
    }


def fresh_pull(repo: RegistryRepository, tag: str) -> int:
    """What `docker pull` on a fresh runner downloads: every blob of the image (not unpacked)."""
    manifest = repo.manifest(tag)
    total = 0
    for digest in [manifest.config_digest, *(layer["digest"] for layer in manifest.layers)]:
        answer = repo._request("GET", f"blobs/{digest}", stream=True)
        for chunk in answer.iter_content(1 << 20):
            total += len(chunk)
    return total


def rollback_figures(
    client: docker.DockerClient, ours_repo: str, naive_repo: str, to_version: str, naive_tag: str, repeat: int
) -> dict:
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
