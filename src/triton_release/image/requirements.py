"""The models' requirements.txt files, resolved together for the target Python.

pip resolves and installs on the host (`--target`, wheels only, for the image's Python and
glibc), so the image build needs no network; the installed tree becomes one layer at the
target Python's site-packages. Two models pinning the same package apart are refused by name.

By default (requirements_options: refuse) the files hold requirements only, and pip is given
the requirements, never the files: no option, path or URL makes it read anything else. pip's
output is never passed through as it is, since it can quote files; only its reasons that name
the models' own requirements are shown.
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
from triton_release.models.repository import REQUIREMENTS_FILE, Repository, link_problem, read_requirements
from triton_release.problems import display_path
from triton_release.cache import atomic_folder, cache_dir


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


def read_pins(model: str, path: Path, options: str = "refuse") -> list[Pin]:
    """The model's requirements; refused at the first line that is not one (an option, a path or a
    URL, unless `options` is "allow": those are left to pip)."""
    found, problems = read_requirements(path, options)
    if problems:
        raise Refused(f"{problems[0]}.")
    return [Pin(model, path, number, requirement) for number, requirement in found]


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


def resolve(repo: Repository, install: PythonInstall, glibc: str, models: list[str] | None = None,
            options: str = "refuse") -> Resolved | None:
    """Install every model's requirements into one tree for the target Python; None when there are none.
    `options`: the requirements_options setting, "refuse" or "allow"."""
    files = requirement_files(repo, models)
    if not files:
        return None
    for path in files.values():
        problem = link_problem(path, repo.root)
        if problem:
            raise Refused(f"{problem}. Nothing was installed.")
    pins = [pin for model, path in sorted(files.items()) for pin in read_pins(model, path, options)]
    check_pins(pins)
    texts = {model: path.read_text(encoding="utf-8") for model, path in sorted(files.items())}
    key = hashlib.sha256(json.dumps([install.version, glibc, options, texts], sort_keys=True).encode()).hexdigest()[:20]
    tree = cache_dir() / "requirements" / key
    if not (tree / ".complete").exists():
        _install(files if options == "allow" else None, pins, install, glibc, tree)
    packages = {}
    for info in sorted(tree.glob("*.dist-info")):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        packages[name] = version
    return Resolved(install.site_packages, tree, packages)


def _install(files: dict[str, Path] | None, pins: list[Pin], install: PythonInstall, glibc: str, tree: Path) -> None:
    """pip reads the files (`-r`) only when they may hold options (`files`); else it gets the pins."""
    with atomic_folder(tree) as partial:  # builds may run at once: each installs into its own folder
        command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                   "--target", str(partial), "--no-compile", "--only-binary=:all:", "--implementation", "cp",
                   "--python-version", install.version]
        for tag in platforms(glibc):
            command += ["--platform", tag]
        if files is None:
            command += [str(pin.requirement) for pin in pins]
        else:
            for path in files.values():
                command += ["-r", str(path)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise _pip_failure(done.stdout + "\n" + done.stderr, pins, install)
        shutil.rmtree(partial / "bin", ignore_errors=True)


# pip's lines that may be shown: each names only the models' requirements or index packages.
_REQUESTED = re.compile(r"^The user requested (?P<req>.+)$")
_DEPENDS = re.compile(r"^(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*) [A-Za-z0-9.+!_-]+ depends on (?P<req>.+)$")
_NO_VERSION = re.compile(r"^ERROR: Could not find a version that satisfies the requirement (?P<req>\S+) "
                         r"\(from versions: [A-Za-z0-9.+!_, -]*\)$")
_NO_DISTRIBUTION = re.compile(r"^ERROR: No matching distribution found for (?P<req>\S+)$")
_CANNOT_INSTALL = re.compile(r"^ERROR: Cannot install (?P<reqs>.+) because these package versions have "
                             r"conflicting dependencies\.$")
_FIXED = ("The conflict is caused by:", "ERROR: ResolutionImpossible: ")
_NETWORK = ("Could not fetch URL", "NewConnectionError", "Temporary failure", "Max retries exceeded")
_CREDENTIALS = re.compile(r"(://)[^/@\s]*@")


def _name(text: str) -> str:
    return canonicalize_name(re.split(r"[<>=!~ \[;@(]", text.strip(), maxsplit=1)[0])


def shown_lines(output: str, pins: list[Pin]) -> list[str]:
    """pip's lines that may be shown: its reasons for a conflict or a missing wheel when they name
    the models' own requirements, and network errors with URL credentials hidden. Anything else
    (a line of some file pip was made to read, the environment) is left out."""
    ours = {canonicalize_name(pin.requirement.name) for pin in pins}
    kept = []
    for line in (raw.strip() for raw in output.splitlines()):
        if not line:
            continue
        for pattern in (_REQUESTED, _NO_VERSION, _NO_DISTRIBUTION):
            match = pattern.match(line)
            if match and _name(match.group("req")) in ours:
                kept.append(line)
        match = _DEPENDS.match(line)
        if match and _valid(match.group("req")):
            kept.append(line)
        match = _CANNOT_INSTALL.match(line)
        if match and all(_name(r) in ours for r in re.split(r", | and ", match.group("reqs"))):
            kept.append(line)
        if line.startswith(_FIXED) or any(word in line for word in _NETWORK):
            kept.append(_CREDENTIALS.sub(r"\1***@", line))
    return kept


def _valid(requirement: str) -> bool:
    try:
        Requirement(requirement)
    except InvalidRequirement:
        return False
    return True


def _pip_failure(output: str, pins: list[Pin], install: PythonInstall) -> Exception:
    lines = shown_lines(output, pins)
    requested = [line.removeprefix("The user requested ").strip()
                 for line in lines if line.startswith("The user requested ")]
    involved = [pin for pin in pins if str(pin.requirement) in requested or
                any(canonicalize_name(pin.requirement.name) == _name(r) for r in requested)]
    models = sorted({pin.model for pin in involved})
    if len(models) > 1:
        first = involved[0]
        second = next(pin for pin in involved if pin.model != first.model)
        return conflict(canonicalize_name(first.requirement.name), first, second)
    missing = next((m for m in map(_NO_DISTRIBUTION.match, lines) if m), None)
    if missing:
        owner = next((p for p in pins if canonicalize_name(p.requirement.name) == _name(missing.group("req"))), None)
        where = f" ({owner.where})" if owner else ""
        return Refused(f"""
            No wheel of {missing.group("req")}{where} installs on Python {install.version} in this image (linux
            x86-64): pick a version with a wheel for it, or vendor the package into the model's version folder.""",
                       details=lines[-5:])
    if any(word in line for line in lines for word in _NETWORK):
        return InfrastructureError("pip could not reach the package index to resolve the models' requirements. "
                                   "Check the network and pip's index settings.", details=lines[-5:])
    reason = lines[-1] if lines else ("pip's output is not shown, as it can quote the files pip read; run "
                                      "`pip install -r` on the models' requirements.txt to see it")
    return Refused(f"pip could not resolve the models' requirements for Python {install.version}: {reason}",
                   details=lines[-8:])
