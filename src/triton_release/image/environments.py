"""Per-model dependency environments, given to the Python backend through EXECUTION_ENV_PATH.

Each model with a requirements.txt gets its own environment. pip resolves and downloads the
model's requirements on the host, for the image's Python and glibc, wheels only, so the build
needs no network. Every wheel is unpacked once into a folder named by its distribution, version
and the wheel's sha256: one content-addressed item, the same in every image and for every model
that uses it, so a requirement change ships only the distributions whose version changed.

A model's environment is a small virtual environment of the image's own Python: `pyvenv.cfg`,
`bin/python3` (a program running the image's Python), `bin/activate` putting `bin` first on
PATH, and a `.pth` file in its site-packages listing the model's distribution folders. The
Python backend sources `bin/activate` before it starts the stub; the stub's embedded Python
finds `python3` on PATH, sees the `pyvenv.cfg` beside it, and so reads that site-packages ahead
of the base image's packages. The image's copy of the model's config.pbtxt gets the
EXECUTION_ENV_PATH parameter appended; the user's file is never changed. Nothing goes into the
base's site-packages, and two models may pin one package apart.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from triton_release import progress
from triton_release.cache import atomic_folder, cache_dir, exclusive, write_atomic
from triton_release.errors import Refused
from triton_release.image.base import PythonInstall
from triton_release.image.layers import Executable
from triton_release.image.plan import Item
from triton_release.image.requirements import Pin, pip_failure, platforms, read_pins, requirement_files
from triton_release.models.devices import ENV_PARAMETER
from triton_release.models.repository import CONFIG_FILE, Repository, link_problem

HOME = PurePosixPath("opt/triton-release")  # in the image, beside the base's own files
DISTS, ENVS = HOME / "dists", HOME / "envs"
LABEL = "triton-release.environments"       # model -> its environment's fingerprint


@dataclass(frozen=True, order=True)
class Distribution:
    name: str        # canonical
    version: str
    sha256: str      # of the wheel
    folder: Path     # the unpacked wheel, on the host

    @property
    def ident(self) -> str:
        return f"{self.name}-{self.version}-{self.sha256[:12]}"

    @property
    def in_image(self) -> PurePosixPath:
        return DISTS / self.ident


@dataclass(frozen=True)
class Environment:
    model: str
    requirements: Path
    distributions: tuple[Distribution, ...]
    python: PythonInstall

    @property
    def in_image(self) -> PurePosixPath:
        return ENVS / self.model

    @property
    def packages(self) -> dict[str, str]:
        return {d.name: d.version for d in self.distributions}

    @property
    def fingerprint(self) -> str:
        """Changes exactly when the environment's contents do."""
        text = " ".join([self.python.version, self.python.executable, *(d.ident for d in self.distributions)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def files(self) -> dict[str, bytes]:
        """The environment folder's files, by their path in the image."""
        home, version = f"/{self.in_image}", self.python.version
        python = Executable(f'#!/bin/sh\nexec {self.python.executable} "$@"\n'.encode())
        return {
            f"{self.in_image}/pyvenv.cfg": (f"home = {PurePosixPath(self.python.executable).parent}\n"
                                            f"include-system-site-packages = true\nversion = {version}\n").encode(),
            **{f"{self.in_image}/bin/{name}": python for name in ("python", "python3", f"python{version}")},
            f"{self.in_image}/bin/activate": (
                f"# The environment of model {json.dumps(self.model)}, made by triton-release from its "
                f"requirements.txt.\n# The Python backend sources this file before it starts the model's stub.\n"
                f'export VIRTUAL_ENV="{home}"\nexport PATH="{home}/bin:$PATH"\n').encode(),
            f"{self.in_image}/lib/python{version}/site-packages/triton-release.pth":
                "".join(f"/{d.in_image}\n" for d in self.distributions).encode(),
        }

    def to_json(self) -> dict:
        return {"path": f"/{self.in_image}", "fingerprint": self.fingerprint, "packages": self.packages}


@dataclass(frozen=True)
class Environments:
    python: str
    by_model: dict[str, Environment]

    @property
    def distributions(self) -> list[Distribution]:
        return sorted({d for env in self.by_model.values() for d in env.distributions})

    def fingerprints(self) -> dict[str, str]:
        return {model: env.fingerprint for model, env in sorted(self.by_model.items())}

    def label(self) -> str:
        return json.dumps(self.fingerprints(), sort_keys=True, separators=(",", ":"))

    def changed_since(self, label: str | None) -> list[str]:
        """The models whose environment differs from the one recorded in an earlier image's label
        (a model that gained or lost its environment included); [] when there is no label."""
        if not label:
            return []
        try:
            before = json.loads(label)
        except ValueError:
            return []
        if not isinstance(before, dict):
            return []
        now = self.fingerprints()
        return sorted(m for m in set(before) | set(now) if before.get(m) != now.get(m))

    def to_json(self) -> dict:
        return {"python": self.python, "distributions": len(self.distributions),
                "models": {m: env.to_json() for m, env in sorted(self.by_model.items())}}


def resolve(repo: Repository, install: PythonInstall, glibc: str, models: list[str] | None = None,
            options: str = "refuse") -> Environments:
    """Each model's environment: its requirements resolved and downloaded for the target Python,
    every wheel unpacked into its own folder. `options`: the requirements_options setting."""
    files = requirement_files(repo, models)
    for path in files.values():
        problem = link_problem(path, repo.root)
        if problem:
            raise Refused(f"{problem}. Nothing was installed.")
    found = {}
    with progress.task("requirements", total=len(files), unit="models") as bar:
        for model, path in sorted(files.items()):
            bar.update(detail=f"{model}: resolving")
            pins = read_pins(model, path, options)
            wheels = download(path, pins, install, glibc, options)
            distributions = []
            for number, wheel in enumerate(wheels, 1):
                bar.update(detail=f"{model}: unpacking {number} of {len(wheels)} distributions")
                distributions.append(unpack(wheel))
            found[model] = Environment(model, path, tuple(sorted(distributions)), install)
            bar.advance(detail="")
    return Environments(install.version, found)


def download(path: Path, pins: list[Pin], install: PythonInstall, glibc: str, options: str) -> list[Path]:
    """The wheels that install the model's requirements, resolved by pip into one shared store.

    pip resolves again on every call, so a dependency left unpinned moves when its index moves,
    unless every distribution pip chose is pinned exactly (name==version) in the file: such a
    resolution cannot move, and is kept."""
    text = path.read_text(encoding="utf-8")
    key = hashlib.sha256(json.dumps([install.version, glibc, options, text]).encode()).hexdigest()[:20]
    store, known = cache_dir() / "wheels", cache_dir() / "resolutions" / f"{key}.json"
    try:
        wheels = [store / name for name in json.loads(known.read_text())]
        if all(wheel.is_file() for wheel in wheels):
            return wheels
    except (OSError, ValueError, TypeError):
        pass
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input",
               "--dest", str(store), "--only-binary=:all:", "--implementation", "cp",
               "--python-version", install.version]
    for tag in platforms(glibc):
        command += ["--platform", tag]
    command += ["-r", str(path)] if options == "allow" else [str(pin.requirement) for pin in pins]
    with exclusive("the wheel store"):  # one pip writes into the store at a time
        store.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise pip_failure(done.stdout + "\n" + done.stderr, pins, install)
    names = sorted({PurePosixPath(match.group(1)).name for match in _GOT.finditer(done.stdout)})
    wheels = [store / name for name in names]
    if options != "allow" and _pinned(wheels, pins):
        write_atomic(known, json.dumps(names))
    return wheels


# pip download's line for each file of the resolution, new or already in the store
_GOT = re.compile(r"^\s*(?:Saved|File was already downloaded) (.+\.whl)\s*$", re.M)


def _pinned(wheels: list[Path], pins: list[Pin]) -> bool:
    exact = {}
    for pin in pins:
        specs = list(pin.requirement.specifier)
        if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
            exact[canonicalize_name(pin.requirement.name)] = Version(specs[0].version)
    for wheel in wheels:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if exact.get(canonicalize_name(name)) != version:
            return False
    return True


def unpack(wheel: Path) -> Distribution:
    """The wheel's files as `pip install --target` lays them out (its .data purelib and platlib
    merged in; scripts, headers and data left out), once per wheel."""
    try:
        name, version, _, _ = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename:
        raise Refused(f"{wheel}: pip gave a file that is not a wheel; remove it and run again.") from None
    digest = hashlib.sha256()
    with open(wheel, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    sha = digest.hexdigest()
    folder = cache_dir() / "dists" / sha
    if not (folder / ".complete").exists():
        try:
            with atomic_folder(folder) as partial:
                _extract(wheel, partial)
        except (zipfile.BadZipFile, EOFError):
            wheel.unlink(missing_ok=True)  # a download cut short: the next run fetches it again
            raise Refused(f"{wheel.name} is damaged (a download cut short?); it was removed: run again.") from None
    return Distribution(canonicalize_name(name), str(version), sha, folder)


def _extract(wheel: Path, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            parts = PurePosixPath(member.filename).parts
            if member.is_dir() or not parts:
                continue
            if member.filename.startswith("/") or ".." in parts or "\\" in member.filename:
                raise Refused(f"{wheel.name}: the wheel holds {member.filename!r}, a path outside its own "
                              "folder; it is not installed. Pin another version.")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)
            if (member.external_attr >> 16) & 0o111:
                target.chmod(0o755)


# -- in the image -----------------------------------------------------------------------------

def env_config(model_folder: Path, env: Environment) -> bytes:
    """The model's config.pbtxt as the image holds it: the user's text with the parameter
    appended (a model without one gets a config naming the backend only; Triton completes it)."""
    path = model_folder / CONFIG_FILE
    text = path.read_text(encoding="utf-8") if path.is_file() else 'backend: "python"\n'
    return (text.rstrip("\n") + f"\n\n# added by triton-release: the model's requirements.txt environment\n"
            f'parameters {{ key: "{ENV_PARAMETER}" value: {{ string_value: "/{env.in_image}" }} }}\n').encode()


def environment_items(envs: Environments, repo: Repository) -> tuple[list[Item], dict[str, dict[str, bytes]]]:
    """The image's part of the environments: one item per distribution and one per model's
    environment folder; and each model's config.pbtxt as the image holds it."""
    items = []
    for dist in envs.distributions:
        entries = {str(dist.in_image / p.relative_to(dist.folder).as_posix()): p
                   for p in sorted(dist.folder.rglob("*")) if p.is_file() and p.name != ".complete"}
        items.append(Item(f"dist/{dist.ident}", entries, sum(p.stat().st_size for p in entries.values()),
                          fingerprint=f"wheel-sha256:{dist.folder.name}"))  # the folder is named by its wheel
    configs = {}
    for model, env in sorted(envs.by_model.items()):
        files = env.files()
        items.append(Item(f"env/{model}", files, sum(len(content) for content in files.values())))
        configs[model] = {CONFIG_FILE: env_config(repo[model].path, env)}
    return items, configs
