"""requirements.lock (what the action's image installs) agrees with pyproject.toml.

Each check is a function of the pyproject and lock paths that returns its problems, so the
same checks run on the real files and, below, on changed copies in a temporary folder.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
LOCK = ROOT / "requirements.lock"
FINGERPRINT_KEY = "pyproject-dependencies-sha256"
REGENERATE = "run `make lock` and commit requirements.lock"

# The image's platform (python:3.11-slim on x86_64), for evaluating environment markers.
TARGET_ENV = {
    **default_environment(),
    "implementation_name": "cpython",
    "implementation_version": "3.11.0",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_system": "Linux",
    "python_full_version": "3.11.0",
    "python_version": "3.11",
    "sys_platform": "linux",
}


@dataclass
class Pin:
    name: str
    version: Version
    hashes: list[str]
    line: int


# -- reading the files ------------------------------------------------------------------------


def dependencies(pyproject: Path) -> list[str]:
    with pyproject.open("rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def fingerprint(deps: list[str]) -> str:
    """sha256 of the JSON list of [project].dependencies, exactly as written, in order."""
    return hashlib.sha256(json.dumps(deps).encode("utf-8")).hexdigest()


def recorded_fingerprint(lock: Path) -> str | None:
    for line in lock.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") and FINGERPRINT_KEY + ":" in line:
            return line.split(":", 1)[1].strip()
    return None


def read_lock(lock: Path) -> tuple[dict[str, Pin], list[str]]:
    """The pins by canonical name, and the problems with the lines that are no exact, hashed pin."""
    pins: dict[str, Pin] = {}
    problems: list[str] = []
    logical, start = "", 0
    for number, raw in enumerate(lock.read_text(encoding="utf-8").splitlines(), start=1):
        text = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not logical:
            start = number
        logical += " " + text.rstrip("\\").strip()
        if text.endswith("\\"):
            continue
        entry, logical = logical.strip(), ""
        if not entry:
            continue
        spec, *options = entry.split()
        where = f"{lock.name}:{start}"
        try:
            req = Requirement(spec)
        except InvalidRequirement as e:
            problems.append(f"{where}: not a requirement: {spec!r} ({e})")
            continue
        specifiers = list(req.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
            problems.append(f"{where}: {spec} is not pinned with `==`")
            continue
        hashes = [o.split("=", 1)[1] for o in options if o.startswith("--hash=")]
        unknown = [o for o in options if not o.startswith("--hash=")]
        if unknown:
            problems.append(f"{where}: {spec} has options other than --hash: {' '.join(unknown)}")
        if not hashes:
            problems.append(f"{where}: {spec} has no --hash")
        if any(not h.startswith("sha256:") or len(h) != len("sha256:") + 64 for h in hashes):
            problems.append(f"{where}: {spec} has a hash that is not sha256:<64 hex digits>")
        name = canonicalize_name(req.name)
        if name in pins:
            problems.append(f"{where}: {name} is pinned twice")
        pins[name] = Pin(name, Version(specifiers[0].version), hashes, start)
    return pins, problems


def installed_requires(name: str) -> tuple[Version, list[str]] | None:
    """The installed distribution's version and Requires-Dist, or None when it is not installed."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return Version(dist.version), list(dist.requires or [])


# -- the checks: each returns its problems ----------------------------------------------------


def fingerprint_problems(pyproject: Path, lock: Path) -> list[str]:
    recorded, expected = recorded_fingerprint(lock), fingerprint(dependencies(pyproject))
    if recorded is None:
        return [f"{lock.name} has no `# {FINGERPRINT_KEY}:` header line; {REGENERATE}"]
    if recorded != expected:
        return [
            f"{lock.name} was generated from other [project].dependencies than {pyproject.name} has now "
            f"({FINGERPRINT_KEY} {recorded[:12]}…, expected {expected[:12]}…); {REGENERATE}"
        ]
    return []


def satisfied(req: Requirement, pins: dict[str, Pin], wanted_by: str) -> list[str]:
    pin = pins.get(canonicalize_name(req.name))
    if pin is None:
        return [f"{req.name} (wanted by {wanted_by}) is not pinned in requirements.lock; {REGENERATE}"]
    if req.specifier and not req.specifier.contains(pin.version, prereleases=True):
        return [
            f"{pin.name}=={pin.version} in requirements.lock does not satisfy {req} "
            f"(wanted by {wanted_by}); {REGENERATE}"
        ]
    return []


def pin_problems(pyproject: Path, lock: Path) -> list[str]:
    """Every [project].dependencies entry (for the image's platform) is pinned within its range."""
    pins, _ = read_lock(lock)
    problems = []
    for text in dependencies(pyproject):
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({**TARGET_ENV, "extra": ""}):
            problems += satisfied(req, pins, pyproject.name)
    return problems


def extras_problems(
    pyproject: Path,
    lock: Path,
    requires: Callable[[str], tuple[Version, list[str]] | None] = installed_requires,
) -> list[str]:
    """What each dependency with extras requires, with those extras, is pinned within its range.

    A lock has no package metadata, so this reads the Requires-Dist of the installed distribution:
    with its ranges where its version is the pinned one, by name only where another is installed."""
    pins, _ = read_lock(lock)
    problems: list[str] = []
    for text in dependencies(pyproject):
        req = Requirement(text)
        pin = pins.get(canonicalize_name(req.name))
        if not req.extras or pin is None:
            continue  # pin_problems reports a missing pin
        found = requires(req.name)
        if found is None:
            problems.append(f"{req.name} is not installed: run `make install`")
            continue
        exact = found[0] == pin.version  # else only the names: the installed version's needs stand in
        for dep_text in found[1]:
            dep = Requirement(dep_text)
            envs = [{**TARGET_ENV, "extra": extra} for extra in ["", *sorted(req.extras)]]
            if dep.marker is None or any(dep.marker.evaluate(env) for env in envs):
                if not exact:
                    dep = Requirement(dep.name)
                problems += satisfied(dep, pins, f"{req.name}[{','.join(sorted(req.extras))}]")
    return problems


def hash_problems(lock: Path) -> list[str]:
    pins, problems = read_lock(lock)
    if not pins and not problems:
        problems.append(f"{lock.name} pins nothing")
    return problems


def report(problems: list[str]) -> str:
    return "\n".join(problems)


# -- the real files ---------------------------------------------------------------------------


def test_lock_was_generated_from_the_current_dependencies():
    problems = fingerprint_problems(PYPROJECT, LOCK)
    assert not problems, report(problems)


def test_every_dependency_is_pinned_within_its_range():
    problems = pin_problems(PYPROJECT, LOCK)
    assert not problems, report(problems)


def test_what_the_requested_extras_need_is_pinned():
    problems = extras_problems(PYPROJECT, LOCK)
    assert not problems, report(problems)


def test_every_pin_is_exact_and_hashed():
    problems = hash_problems(LOCK)
    assert not problems, report(problems)


def test_the_lock_is_in_the_image_build_context():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not any(p in ("requirements.lock", "*.lock", "*") for p in ignored)
    assert "requirements.lock" in (ROOT / "Dockerfile").read_text()


# -- the same checks catch a lock that no longer matches -------------------------------------


@pytest.fixture
def copies(tmp_path):
    pyproject, lock = tmp_path / "pyproject.toml", tmp_path / "requirements.lock"
    pyproject.write_bytes(PYPROJECT.read_bytes())
    lock.write_bytes(LOCK.read_bytes())
    return pyproject, lock


def add_dependency(pyproject: Path, requirement: str) -> None:
    text = pyproject.read_text()
    assert "dependencies = [\n" in text
    pyproject.write_text(text.replace("dependencies = [\n", f'dependencies = [\n    "{requirement}",\n', 1))


def test_a_new_dependency_is_caught(copies):
    pyproject, lock = copies
    add_dependency(pyproject, "not-a-real-package>=1.0")
    assert "make lock" in report(fingerprint_problems(pyproject, lock))
    assert "not-a-real-package" in report(pin_problems(pyproject, lock))


def test_a_raised_minimum_is_caught(copies):
    pyproject, lock = copies
    pyproject.write_text(pyproject.read_text().replace('"numpy>=1.24"', '"numpy>=999"'))
    assert fingerprint_problems(pyproject, lock)
    assert "does not satisfy numpy>=999" in report(pin_problems(pyproject, lock))


def test_a_missing_extra_requirement_is_caught(tmp_path):
    pyproject, lock = tmp_path / "pyproject.toml", tmp_path / "requirements.lock"
    pyproject.write_text('[project]\ndependencies = ["client[grpc]>=1"]\n')
    lock.write_text(f"client==1.2 \\\n    --hash=sha256:{'a' * 64}\n")
    metadata = {"client": (Version("1.2"), ["grpcio>=1.50; extra == 'grpc'", "aiohttp; extra == 'http'"])}
    problems = extras_problems(pyproject, lock, requires=metadata.get)
    assert problems == [f"grpcio (wanted by client[grpc]) is not pinned in requirements.lock; {REGENERATE}"]


def test_an_unhashed_or_loose_pin_is_caught(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"# header\nsix==1.16.0\nidna>=3 \\\n    --hash=sha256:{'b' * 64}\n")
    assert hash_problems(lock) == [
        "requirements.lock:2: six==1.16.0 has no --hash",
        "requirements.lock:3: idna>=3 is not pinned with `==`",
    ]
