"""The models' requirements.txt files: read, checked, resolved for the image's Python, and pip's
failures explained.

By default (requirements_options: refuse) the files hold requirements only, and pip is given
the requirements, never the files: no option, path or URL makes it read anything else. pip's
output is never passed through as it is, since it can quote files; only its reasons that name
the model's own requirements are shown. Each model's requirements are resolved on their own,
into its own environment (image/environments.py), for the image's Python: markers are evaluated
with that Python's values, not the tool's. A resolution that cannot move (every distribution
pinned exactly) is kept in the cache by everything it was made under, pip's index settings
included, and checked when read: the cache is a hint.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import cast

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from triton_release.cache import cache_dir, discard, exclusive
from triton_release.errors import InfrastructureError, Refused
from triton_release.files import write_atomic
from triton_release.image.base import PythonInstall
from triton_release.models.repository import REQUIREMENTS_FILE, Repository
from triton_release.models.requirements_file import read_requirements
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
    return {
        m.name: m.path / REQUIREMENTS_FILE
        for m in repo
        if (models is None or m.name in models) and (m.path / REQUIREMENTS_FILE).is_file()
    }


def read_pins(model: str, path: Path, options: str = "refuse") -> list[Pin]:
    """The model's requirements; refused at the first line that is not one (an option, a path or a
    URL, unless `options` is "allow": those are left to pip)."""
    found, problems = read_requirements(path, options)
    if problems:
        raise Refused(f"{problems[0]}.")
    return [Pin(model, path, number, requirement) for number, requirement in found]


# -- the image's Python, as pip sees it -----------------------------------------------------------


def marker_environment(python: str) -> dict[str, str]:
    """The values requirement markers (`; python_version < "3.12"`) are evaluated against: the
    image's CPython X.Y on linux x86-64, not the tool's own Python. The kernel's values stay the
    host's (a container runs on it); the image's micro version is not inspected: X.Y.0."""
    full = f"{python}.0"
    defaults = cast("dict[str, str]", default_environment())
    return {
        **defaults,
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_system": "Linux",
        "python_full_version": full,
        "python_version": python,
        "sys_platform": "linux",
    }


def for_python(pins: list[Pin], python: str) -> list[Pin]:
    """The pins whose marker holds on the image's Python (all the others are not installed)."""
    environment = {**marker_environment(python), "extra": ""}
    return [pin for pin in pins if pin.requirement.marker is None or pin.requirement.marker.evaluate(environment)]


def unmarked(requirement: Requirement) -> str:
    """The requirement without its marker, once the marker was evaluated for the image's Python."""
    copy = Requirement(str(requirement))
    copy.marker = None
    return str(copy)


# pip evaluates markers (a requirement's own, and its dependencies' Requires-Dist) for the Python that
# runs it, whatever --python-version says: it is run with the image's Python's marker values instead.
_PIP_FOR_PYTHON = """\
import json, sys
from pip._vendor.packaging import markers
target, host = json.loads(sys.argv[1]), markers.default_environment
markers.default_environment = lambda: {**host(), **target}
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def pip_command(python: str, *args: str) -> list[str]:
    """`python -m pip ARGS`, resolving for the image's Python X.Y."""
    return [sys.executable, "-c", _PIP_FOR_PYTHON, json.dumps(marker_environment(python), sort_keys=True), *args]


# pip's settings that decide where wheels come from and which versions may be chosen
_SOURCES = ("index-url", "extra-index-url", "find-links", "no-index", "constraint")


@dataclass(frozen=True)
class PipSettings:
    """pip's index settings as the tool's pip reads them (its configuration files and PIP_*
    variables; the tool gives pip none of its own): a kept resolution was made under them."""

    lines: tuple[str, ...] = ()  # as `pip config list` shows them, e.g. ":env:.find-links='/wheels'"
    constraints: tuple[Path, ...] = ()  # the constraint files they name

    @property
    def key(self) -> str:
        """Changes when any of them, or a constraint file's text, does."""
        digest = hashlib.sha256("\n".join(self.lines).encode())
        for path in self.constraints:
            try:
                digest.update(b"\0" + path.read_bytes())
            except OSError:
                digest.update(b"\0(unreadable)")
        return digest.hexdigest()


def pip_settings() -> PipSettings:
    """The index settings pip will use (`pip config list`, which includes the PIP_* variables)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    lines, constraints = [], []
    for line in sorted(done.stdout.splitlines()):
        name, _, value = line.partition("=")
        if name.rpartition(".")[2] in _SOURCES:
            lines.append(line)
            if name.endswith(".constraint"):
                constraints += [Path(v) for v in value.strip("'\"").split() if v]
    return PipSettings(tuple(lines), tuple(constraints))


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
_NO_VERSION = re.compile(
    r"^ERROR: Could not find a version that satisfies the requirement (?P<req>\S+) "
    r"\(from versions: [A-Za-z0-9.+!_, -]*\)$"
)
_NO_DISTRIBUTION = re.compile(r"^ERROR: No matching distribution found for (?P<req>\S+)$")
_CANNOT_INSTALL = re.compile(
    r"^ERROR: Cannot install (?P<reqs>.+) because these package versions have "
    r"conflicting dependencies\.$"
)
_FIXED = ("The conflict is caused by:", "ERROR: ResolutionImpossible: ")
_NETWORK = ("Could not fetch URL", "NewConnectionError", "Temporary failure", "Max retries exceeded")
_CREDENTIALS = re.compile(r"(://)[^/@\s]*@")
_CONSTRAINT = "(constraint) "  # pip's prefix of a requested constraint


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
            if match and _name(match.group("req").removeprefix(_CONSTRAINT)) in ours:
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


def _involved(lines: list[str], pins: list[Pin]) -> tuple[list[Pin], list[str]]:
    """The pins pip names in a conflict (requested, in "Cannot install A and B", or as the
    distribution whose dependency conflicts), and the constraints it names."""
    requested: list[str] = []
    constraints: list[str] = []
    named: set[str] = set()
    for line in lines:
        if line.startswith("The user requested "):
            text = line.removeprefix("The user requested ").strip()
            (constraints if text.startswith(_CONSTRAINT) else requested).append(text.removeprefix(_CONSTRAINT))
        match = _CANNOT_INSTALL.match(line)
        if match:
            named.update(_name(r) for r in re.split(r", | and ", match.group("reqs")))
        match = _DEPENDS.match(line)
        if match:
            named.add(canonicalize_name(match.group("dist")))
    named.update(_name(r) for r in requested)
    return [pin for pin in pins if canonicalize_name(pin.requirement.name) in named], constraints


def _constraint_where(constraint: str, settings: PipSettings) -> str:
    """Where pip's configuration sets `constraint`: "FILE:LINE", or what names the files."""
    for path in settings.constraints:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if line and _valid(line) and str(Requirement(line)) == constraint:
                return f"{display_path(path)}:{number}"
    return "a constraint file of pip's configuration (PIP_CONSTRAINT or pip.conf)"


def pip_failure(
    output: str, pins: list[Pin], install: PythonInstall, settings: PipSettings = PipSettings()
) -> Exception:
    lines = shown_lines(output, pins)
    involved, constraints = _involved(lines, pins)
    if any(line.startswith(_FIXED) for line in lines) and involved:
        where = ", ".join(
            [
                *(f"{pin.requirement} ({pin.where})" for pin in involved),
                *(f"the constraint {c} ({_constraint_where(c, settings)})" for c in constraints),
            ]
        )
        fix = "Loosen or agree the versions in its requirements.txt" + (" or the constraint" if constraints else "")
        return Refused(
            f"""
            The requirements of model {involved[0].model} cannot be installed together on Python
            {install.version}: {where}. {fix}.""",
            details=lines[-8:],
        )
    missing = next((m for m in map(_NO_DISTRIBUTION.match, lines) if m), None)
    if missing:
        owner = next((p for p in pins if canonicalize_name(p.requirement.name) == _name(missing.group("req"))), None)
        where = f" ({owner.where})" if owner else ""
        return Refused(
            f"""
            No wheel of {missing.group("req")}{where} installs on Python {install.version} in this image (linux
            x86-64): pick a version with a wheel for it, or vendor the package into the model's version folder.""",
            details=lines[-5:],
        )
    if any(word in line for line in lines for word in _NETWORK):
        return InfrastructureError(
            "pip could not reach the package index to resolve the models' requirements. "
            "Check the network and pip's index settings.",
            details=lines[-5:],
        )
    files = sorted({pin.where.rsplit(":", 1)[0] for pin in pins}) or ["the model's requirements.txt"]
    reason = (
        lines[-1]
        if lines
        else (
            f"pip's output is not shown, as it can quote the files pip read; run `pip download -r {files[0]}` to see it"
        )
    )
    return Refused(f"pip could not resolve {files[0]} for Python {install.version}: {reason}", details=lines[-8:])


# -- resolved and downloaded ---------------------------------------------------------------------

RESOLUTION_FORMAT = "2"  # in every kept resolution's key: change it when what a resolution holds changes


def download(
    path: Path, pins: list[Pin], install: PythonInstall, glibc: str, options: str, settings: PipSettings = PipSettings()
) -> list[Path]:
    """The wheels that install the model's requirements, resolved by pip into one shared store.

    Markers are evaluated for the image's Python: a pin whose marker does not hold there is not
    installed, and pip sees the image's marker values for the dependencies' markers too. pip
    resolves again on every call, so a dependency left unpinned moves when its index moves, unless
    every distribution pip chose is pinned exactly (name==version) in the file: such a resolution
    cannot move, and is kept, by everything it was made under (pip's index settings included)."""
    text = path.read_text(encoding="utf-8")
    wanted = for_python(pins, install.version)
    key = hashlib.sha256(
        json.dumps([RESOLUTION_FORMAT, install.version, glibc, options, text, settings.key]).encode()
    ).hexdigest()[:20]
    store, known = cache_dir() / "wheels", cache_dir() / "resolutions" / f"{key}.json"
    kept = _kept(known, store, wanted) if options != "allow" else None
    if kept is not None:
        return kept
    command = pip_command(
        install.version,
        "download",
        "--disable-pip-version-check",
        "--no-input",
        "--dest",
        str(store),
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        install.version,
    )
    for tag in platforms(glibc):
        command += ["--platform", tag]
    if options == "allow":
        command += ["-r", str(path)]
    elif wanted:
        command += [unmarked(pin.requirement) for pin in wanted]
    else:
        return []  # no requirement is for this Python
    with exclusive("the wheel store"):  # one pip writes into the store at a time
        store.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise pip_failure(done.stdout + "\n" + done.stderr, pins, install, settings)
    names = sorted({PurePosixPath(match.group(1)).name for match in _GOT.finditer(done.stdout)})
    wheels = [store / name for name in names]
    if options != "allow" and _pinned(wheels, wanted):
        write_atomic(known, json.dumps(names))
    return wheels


# pip download's line for each file of the resolution, new or already in the store
_GOT = re.compile(r"^\s*(?:Saved|File was already downloaded) (.+\.whl)\s*$", re.M)


def _kept(known: Path, store: Path, pins: list[Pin]) -> list[Path] | None:
    """The wheels of a kept resolution, when it is one (a list of wheel names in the store naming
    exactly the pinned distributions) and they are all in the store; None otherwise. One of another
    shape is discarded with a warning."""
    try:
        names = json.loads(known.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        names = None
    shaped = (
        isinstance(names, list)
        and all(isinstance(n, str) and _WHEEL_NAME.fullmatch(n) for n in names)
        and len(set(names)) == len(names)
    )
    wheels = [store / name for name in names] if shaped else []
    if not shaped or not _pinned(wheels, pins) or not _covers(wheels, pins):
        discard(known, "is not a resolution of the pinned requirements it is kept for")
        return None
    return wheels if all(wheel.is_file() for wheel in wheels) else None


_WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+!-]+\.whl")  # a file name in the store, never a path


def _covers(wheels: list[Path], pins: list[Pin]) -> bool:
    """Every pin has its wheel (the names are wheel names: `_pinned` parsed them)."""
    names = {canonicalize_name(parse_wheel_filename(wheel.name)[0]) for wheel in wheels}
    return all(canonicalize_name(pin.requirement.name) in names for pin in pins)


def _pinned(wheels: list[Path], pins: list[Pin]) -> bool:
    exact = {}
    for pin in pins:
        specs = list(pin.requirement.specifier)
        if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
            exact[canonicalize_name(pin.requirement.name)] = Version(specs[0].version)
    for wheel in wheels:
        try:
            name, version, _, _ = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            return False
        if exact.get(canonicalize_name(name)) != version:
            return False
    return True
