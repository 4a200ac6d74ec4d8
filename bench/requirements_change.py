"""A requirements change: one model's pinned distribution moves, beside a model that needs torch.

Model `t` needs a heavy distribution (torch by default) and imports it; model `s` needs
tabulate 0.8.10. Both pipelines release once (warm), then `s` moves to tabulate 0.10.0 and both
release again. triton-release gives each distribution its own content-addressed layer; the
naive pipeline installs every model's requirements into one tree with `pip install --target`
(as this tool did before per-model environments), copies it into the image's site-packages in
one layer beside one COPY of the models, serves every model, and pushes. Uploaded bytes are the
layers of the new manifest that the previous one did not have, read from the registry.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker

from bench import pipeline
from bench.generate import MODEL_PY, git, write_model
from bench.rebuild import BASE_IMAGE, docker_build
from triton_release.image.requirements import platforms
from triton_release.registry.client import RegistryRepository

HEAVY = "torch==2.13.0+cpu"
CHANGED = ("tabulate==0.8.10", "tabulate==0.10.0")
PYTHON, GLIBC = "3.11", "2.36"  # the stand-in base's
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
NAIVE_DOCKERFILE = f"FROM {BASE_IMAGE}\nCOPY site-packages/ {SITE_PACKAGES}/\nCOPY model_repository /models\n"


def module_of(requirement: str) -> str:
    return requirement.split("==")[0].strip().lower().replace("-", "_")


def write_env_model(models: Path, name: str, requirement: str) -> None:
    """The add-one model, importing the distribution its requirements.txt pins."""
    write_model(models, name, offset=1)
    module = module_of(requirement)
    (models / name / "1" / "model.py").write_text(
        f"import {module}  # from the model's requirements.txt\n" + MODEL_PY.format(offset=1)
    )
    (models / name / "requirements.txt").write_text(requirement + "\n")


def pip(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args[:2])} failed:\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}")
    return done


def wheel_bytes(requirement: str) -> tuple[str, int]:
    """The wheel file pip picks for `requirement` on the base's Python: its name and size."""
    with tempfile.TemporaryDirectory() as tmp:
        pip(
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            PYTHON,
            *[arg for tag in platforms(GLIBC) for arg in ("--platform", tag)],
            "--dest",
            tmp,
            requirement,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        return wheel.name, wheel.stat().st_size


def naive_build(client: docker.DockerClient, root: Path, tag: str) -> None:
    """Every model's requirements installed into one tree on the host, one COPY of it into the
    image's site-packages, one COPY of the models."""
    models = root / "model_repository"
    requirements = sorted(
        {
            line.strip()
            for path in models.glob("*/requirements.txt")
            for line in path.read_text().splitlines()
            if line.strip()
        }
    )
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as context:
        site = Path(tmp) / "site-packages"
        pip(
            "install",
            "--target",
            str(site),
            "--no-compile",
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            PYTHON,
            *[arg for tag in platforms(GLIBC) for arg in ("--platform", tag)],
            *requirements,
        )
        shutil.rmtree(site / "bin", ignore_errors=True)
        docker_build(client, NAIVE_DOCKERFILE, {"site-packages": site, "model_repository": models}, tag, context)


def naive_release(client: docker.DockerClient, root: Path, repo: str, tag: str, changed: str) -> dict[str, float]:
    """The naive release's phases in seconds: install and build, serve and test, push."""
    phases, start = {}, time.perf_counter()
    naive_build(client, root, f"{repo}:{tag}")
    phases["install_and_build"] = time.perf_counter() - start
    pipeline.serve_and_check(client, f"{repo}:{tag}", root, changed, load_timeout=900)
    phases["serve_and_test"] = time.perf_counter() - start - phases["install_and_build"]
    pipeline.docker_push(client, repo, tag)
    phases["push"] = time.perf_counter() - start - phases["install_and_build"] - phases["serve_and_test"]
    return {k: round(v, 3) for k, v in phases.items()}


def layer_names(registry: RegistryRepository, tag: str, report: dict) -> dict[int, dict]:
    """Position in the image -> the build's layer there (its file name and items): the release's
    layers are the image's last ones, in the build's order."""
    built = report["steps"]["build"]["layers"]
    offset = len(registry.manifest(tag).layers) - len(built)
    return {offset + i: layer for i, layer in enumerate(built)}


def overhead_blobs(registry: RegistryRepository, tag: str) -> dict:
    """What a push sends besides layers: the image configuration and the manifest."""
    import json

    manifest = registry.manifest(tag)
    return {
        "config_bytes": json.loads(manifest.body).get("config", {}).get("size"),
        "manifest_bytes": len(manifest.body),
    }


def measure(
    client: docker.DockerClient, heavy: str = HEAVY, changed: tuple[str, str] = CHANGED, run_id: str | None = None
) -> dict:
    run_id = run_id or time.strftime("%Y%m%d%H%M%S")
    ours_repo = f"{pipeline.REGISTRY}/bench-{run_id}/requirements-ours"
    naive_repo = f"{pipeline.REGISTRY}/bench-{run_id}/requirements-naive"
    ours, naive = RegistryRepository.parse(ours_repo), RegistryRepository.parse(naive_repo)
    figures: dict = {"heavy": heavy, "changed_from": changed[0], "changed_to": changed[1], "repeat": 1}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "work"
            models = root / "model_repository"
            write_env_model(models, "t", heavy)
            write_env_model(models, "s", changed[0])
            git(root, "init", "-q", "-b", "main")
            git(root, "config", "user.email", "bench@example.com")
            git(root, "config", "user.name", "bench")
            git(root, "add", "-A")
            git(root, "commit", "-q", "-m", "t and s")
            seconds, report = pipeline.our_release(root, ours_repo)  # the previous release, warm
            figures["first_release_s"] = {"triton_release": round(seconds, 3)}
            figures["first_release_s"]["naive"] = round(
                sum(naive_release(client, root, naive_repo, "r0", "s").values()), 3
            )
            print(
                f"  first release of t ({heavy}) and s ({changed[0]}): triton-release "
                f"{figures['first_release_s']['triton_release']:.1f} s, naive {figures['first_release_s']['naive']:.1f} s",
                flush=True,
            )
            (models / "s" / "requirements.txt").write_text(changed[1] + "\n")
            git(root, "commit", "-q", "-am", f"s: {changed[1]}")
            naive_phases = naive_release(client, root, naive_repo, "r1", "s")
            naive_s = sum(naive_phases.values())
            naive_up = pipeline.new_bytes(naive, "r1", "r0")
            ours_s, report = pipeline.our_release(root, ours_repo)
            version, previous = report["version"], report["steps"]["changed"]["previous_version"]
            names = layer_names(ours, version, report)
            added = [
                {
                    "layer": names.get(i, {}).get("name", "(base)"),
                    "items": names.get(i, {}).get("items", []),
                    "bytes": layer["size"],
                }
                for i, layer in pipeline.new_layers(ours, version, previous)
            ]
            wheel, wheel_size = wheel_bytes(changed[1])
            ours_up = sum(layer["bytes"] for layer in added)
            figures.update(
                {
                    "release_s": {
                        "triton_release": round(ours_s, 3),
                        "naive": round(naive_s, 3),
                        "ratio": round(ours_s / naive_s, 3),
                        "target": 0.2,
                        "met": ours_s / naive_s <= 0.2,
                    },
                    "uploaded_bytes": {
                        "triton_release": ours_up,
                        "naive": naive_up,
                        "changed_wheel": wheel_size,
                        "wheel": wheel,
                        "ratio_to_wheel": round(ours_up / wheel_size, 3),
                        "target": 1.1,
                        "met": ours_up / wheel_size <= 1.1,
                    },
                    "new_layers": added,
                    "seconds_by_step": {"triton_release": pipeline.step_seconds(report), "naive": naive_phases},
                    "tested": sorted(c["case"] for c in report["steps"]["test"]["cases"]),
                    "version": version,
                    "previous_version": previous,
                    **overhead_blobs(ours, version),
                }
            )
    finally:
        pipeline.remove_images(client, ours_repo, naive_repo)
    return figures
