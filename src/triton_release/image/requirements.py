"""The models' requirements.txt files: read, checked, and pip's failures explained.

By default (requirements_options: refuse) the files hold requirements only, and pip is given
the requirements, never the files: no option, path or URL makes it read anything else. pip's
output is never passed through as it is, since it can quote files; only its reasons that name
the model's own requirements are shown. Each model's requirements are resolved on their own,
into its own environment (image/environments.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from triton_release.image.base import PythonInstall
from triton_release.errors import InfrastructureError, Refused
from triton_release.models.repository import REQUIREMENTS_FILE, Repository, read_requirements
from triton_release.problems import display_path


@dataclass(frozen=True)
class Pin:
    model: str
    path: Path
    line: int
    requirement: Requirement

    @property
    def where(self) -> str:
        return f"{display_path(self.path)}:{self.line}"


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


def platforms(glibc: str) -> list[str]:
    """manylinux tags the image's glibc can run, newest first."""
    try:
        minor = int(glibc.split(".")[1])
    except (IndexError, ValueError):
        minor = 17
    tags = [f"manylinux_2_{m}_x86_64" for m in range(minor, 16, -1)]
    return tags + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


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


def pip_failure(output: str, pins: list[Pin], install: PythonInstall) -> Exception:
    lines = shown_lines(output, pins)
    requested = [line.removeprefix("The user requested ").strip()
                 for line in lines if line.startswith("The user requested ")]
    involved = [pin for pin in pins if str(pin.requirement) in requested or
                any(canonicalize_name(pin.requirement.name) == _name(r) for r in requested)]
    if any(line.startswith(_FIXED) for line in lines) and involved:
        where = ", ".join(f"{pin.requirement} ({pin.where})" for pin in involved)
        return Refused(f"""
            The requirements of model {involved[0].model} cannot be installed together on Python
            {install.version}: {where}. Loosen or agree the versions in its requirements.txt.""",
                       details=lines[-8:])
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
    files = sorted({pin.where.rsplit(":", 1)[0] for pin in pins}) or ["the model's requirements.txt"]
    reason = lines[-1] if lines else ("pip's output is not shown, as it can quote the files pip read; run "
                                      f"`pip download -r {files[0]}` to see it")
    return Refused(f"pip could not resolve {files[0]} for Python {install.version}: {reason}",
                   details=lines[-8:])
