"""The models' requirements.txt files, resolved together for the target Python.

pip resolves and installs on the host (`--target`, wheels only, for the image's Python and
glibc), so the image build needs no network; the installed tree becomes one layer at the
target Python's site-packages. Two models pinning the same package apart are refused by name.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from triton_release.image.base import PythonInstall
from triton_release.errors import InfrastructureError, Refused
from triton_release.models.repository import Repository
from triton_release.problems import display_path
from triton_release.cache import atomic_folder, cache_dir

REQUIREMENTS_FILE = "requirements.txt"


@dataclass(frozen=True)
class Pin:
    model: str
    path: Path
    line: int
    requirement: Requirement

    @property
    def where(self) -> str:
        return f"{display_path(self.path)}:{self.line}"


@dataclass(frozen=True)
class Resolved:
    site_packages: str          # where the tree goes in the image
    tree: Path                  # the installed packages on the host
    packages: dict[str, str]    # name -> version

    def to_json(self) -> dict:
        return {"site_packages": self.site_packages, "packages": self.packages}


def requirement_files(repo: Repository, models: list[str] | None = None) -> dict[str, Path]:
    return {m.name: m.path / REQUIREMENTS_FILE for m in repo
            if (models is None or m.name in models) and (m.path / REQUIREMENTS_FILE).is_file()}


def read_pins(model: str, path: Path) -> list[Pin]:
    pins = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = raw.split(" #")[0].strip()
        if not text or text.startswith(("#", "-")):
            continue
        try:
            pins.append(Pin(model, path, number, Requirement(text)))
        except InvalidRequirement as exc:
            raise Refused(f"{display_path(path)}:{number}: {text!r} is not a requirement ({exc}). "
                          f"Write it as name==version, one per line.") from None
    return pins


def check_pins(pins: list[Pin]) -> None:
    """Two models asking for exact versions that no single version satisfies."""
    by_name: dict[str, list[Pin]] = {}
    for pin in pins:
        by_name.setdefault(canonicalize_name(pin.requirement.name), []).append(pin)
    for name, group in by_name.items():
        for first in group:
            exact = [s.version for s in first.requirement.specifier if s.operator == "=="]
            for second in group:
                if second.model == first.model or not exact:
                    continue
                if not second.requirement.specifier.contains(exact[0], prereleases=True):
                    raise conflict(name, first, second)


def conflict(name: str, first: Pin, second: Pin) -> Refused:
    return Refused(f"""
        The models' requirements conflict: {first.model} needs {first.requirement}
        ({first.where}) and {second.model} needs {second.requirement} ({second.where}); one image
        installs one {name}. Agree on a version in both files.""")


def platforms(glibc: str) -> list[str]:
    """manylinux tags the image's glibc can run, newest first."""
    try:
        minor = int(glibc.split(".")[1])
    except (IndexError, ValueError):
        minor = 17
    tags = [f"manylinux_2_{m}_x86_64" for m in range(minor, 16, -1)]
    return tags + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def resolve(repo: Repository, install: PythonInstall, glibc: str, models: list[str] | None = None) -> Resolved | None:
    """Install every model's requirements into one tree for the target Python; None when there are none."""
    files = requirement_files(repo, models)
    if not files:
        return None
    pins = [pin for model, path in sorted(files.items()) for pin in read_pins(model, path)]
    check_pins(pins)
    texts = {model: path.read_text(encoding="utf-8") for model, path in sorted(files.items())}
    key = hashlib.sha256(json.dumps([install.version, glibc, texts], sort_keys=True).encode()).hexdigest()[:20]
    tree = cache_dir() / "requirements" / key
    if not (tree / ".complete").exists():
        _install(files, pins, install, glibc, tree)
    packages = {}
    for info in sorted(tree.glob("*.dist-info")):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        packages[name] = version
    return Resolved(install.site_packages, tree, packages)


def _install(files: dict[str, Path], pins: list[Pin], install: PythonInstall, glibc: str, tree: Path) -> None:
    with atomic_folder(tree) as partial:  # builds may run at once: each installs into its own folder
        command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                   "--target", str(partial), "--no-compile", "--only-binary=:all:", "--implementation", "cp",
                   "--python-version", install.version]
        for tag in platforms(glibc):
            command += ["--platform", tag]
        for path in files.values():
            command += ["-r", str(path)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise _pip_failure(done.stdout + "\n" + done.stderr, pins, install)
        shutil.rmtree(partial / "bin", ignore_errors=True)


def _pip_failure(stderr: str, pins: list[Pin], install: PythonInstall) -> Exception:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    requested = [line.removeprefix("The user requested ").strip()
                 for line in lines if line.startswith("The user requested ")]
    involved = [pin for pin in pins if str(pin.requirement) in requested or
                any(canonicalize_name(pin.requirement.name) == canonicalize_name(re.split(r"[<>=!~ \[;]", r)[0])
                    for r in requested)]
    models = sorted({pin.model for pin in involved})
    if len(models) > 1:
        first = involved[0]
        second = next(pin for pin in involved if pin.model != first.model)
        return conflict(canonicalize_name(first.requirement.name), first, second)
    missing = re.search(r"No matching distribution found for (\S+)", stderr)
    if missing:
        owner = next((p for p in pins if canonicalize_name(p.requirement.name)
                      == canonicalize_name(re.split(r"[<>=!~ \[;]", missing.group(1))[0])), None)
        where = f" ({owner.where})" if owner else ""
        return Refused(f"""
            No wheel of {missing.group(1)}{where} installs on Python {install.version} in this image (linux
            x86-64): pick a version with a wheel for it, or vendor the package into the model's version folder.""",
                       details=lines[-5:])
    if any("Could not fetch URL" in line or "NewConnectionError" in line or "Temporary failure" in line
           for line in lines):
        return InfrastructureError("pip could not reach the package index to resolve the models' requirements. "
                                   "Check the network and pip's index settings.", details=lines[-5:])
    return Refused(f"pip could not resolve the models' requirements for Python {install.version}: "
                   f"{lines[-1] if lines else 'no reason given'}", details=lines[-8:])
