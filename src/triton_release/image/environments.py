"""Per-model dependency environments, given to the Python backend through EXECUTION_ENV_PATH.

Each model with a requirements.txt gets its own environment. pip resolves and downloads the
model's requirements on the host, for the image's Python and glibc, wheels only, so the build
needs no network. Every wheel is unpacked once into a folder named by its distribution, version
and the wheel's sha256: one content-addressed item, the same in every image and for every model
that uses it, so a requirement change ships only the distributions whose version changed.

A model's environment is a small virtual environment of the image's own Python: `pyvenv.cfg`,
`bin/python3` (a program running the image's Python as this environment's), the console scripts
of its distributions (as pip writes them), `bin/activate` putting `bin` first on PATH, and a
`.pth` file in its site-packages listing the model's distribution folders. The Python backend
sources `bin/activate` before it starts the stub; the stub's embedded Python finds `python3` on
PATH, sees the `pyvenv.cfg` beside it, and so reads that site-packages ahead of the base image's
packages. The image's copy of the model's config.pbtxt gets the EXECUTION_ENV_PATH parameter
appended; the user's file is never changed. Nothing goes into the base's site-packages, and two
models may pin one package apart.

The cache folder is a hint, never the truth (actions/cache may restore it from another branch or
fork): an unpacked wheel is checked once per run against the wheel it claims to be (its file list
and modes, and its RECORD's hashes, read from the wheel itself) before it enters a layer, and
rebuilt, with a warning, when it differs. A kept resolution is used only under the index settings
it was made under, and only when it still names exactly the pinned distributions.
"""

from __future__ import annotations

import base64
import configparser
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from stat import S_ISREG
from typing import cast

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from triton_release import progress
from triton_release.cache import cache_dir, checked, discard, mark_checked
from triton_release.errors import Refused
from triton_release.files import atomic_folder
from triton_release.image.base import PythonInstall
from triton_release.image.layers import Executable
from triton_release.image.plan import Item
from triton_release.image.requirements import PipSettings, download, pip_settings, read_pins, requirement_files
from triton_release.models.devices import ENV_PARAMETER
from triton_release.models.repository import CONFIG_FILE, Repository, link_problem

HOME = PurePosixPath("opt/triton-release")  # in the image, beside the base's own files
DISTS, ENVS = HOME / "dists", HOME / "envs"
# in every fingerprint: change it when the files an environment is made of change for the same
# distributions (2: bin/python runs as the environment's Python; console scripts)
ENV_FORMAT = "2"

log = logging.getLogger("triton_release")


@dataclass(frozen=True, order=True)
class Distribution:
    name: str  # canonical
    version: str
    sha256: str  # of the wheel
    folder: Path  # the unpacked wheel, on the host

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
        text = " ".join(
            [ENV_FORMAT, self.python.version, self.python.executable, *(d.ident for d in self.distributions)]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def files(self) -> dict[str, bytes]:
        """The environment folder's files, by their path in the image."""
        home, version = f"/{self.in_image}", self.python.version
        # started by the name it was called by (exec -a, a bash builtin: the Python backend needs bash),
        # the image's Python finds this environment's pyvenv.cfg, as a venv's python does
        python = Executable(f'#!/bin/bash\nexec -a "$0" {self.python.executable} "$@"\n'.encode())
        ours = ("python", "python3", f"python{version}", "activate")
        scripts = {
            name: Executable(_script(f"{home}/bin/python", target))
            for dist in self.distributions
            for name, target in console_scripts(dist.folder).items()
            if name not in ours
        }
        return {
            f"{self.in_image}/pyvenv.cfg": (
                f"home = {PurePosixPath(self.python.executable).parent}\n"
                f"include-system-site-packages = true\nversion = {version}\n"
            ).encode(),
            **{f"{self.in_image}/bin/{name}": python for name in ours[:3]},
            **{f"{self.in_image}/bin/{name}": script for name, script in sorted(scripts.items())},
            f"{self.in_image}/bin/activate": (
                f"# The environment of model {json.dumps(self.model)}, made by triton-release from its "
                f"requirements.txt.\n# The Python backend sources this file before it starts the model's stub.\n"
                f'export VIRTUAL_ENV="{home}"\nexport PATH="{home}/bin:$PATH"\n'
            ).encode(),
            f"{self.in_image}/lib/python{version}/site-packages/triton-release.pth": "".join(
                f"/{d.in_image}\n" for d in self.distributions
            ).encode(),
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
        return {
            "python": self.python,
            "distributions": len(self.distributions),
            "models": {m: env.to_json() for m, env in sorted(self.by_model.items())},
        }


def resolve(
    repo: Repository, install: PythonInstall, glibc: str, models: list[str] | None = None, options: str = "refuse"
) -> Environments:
    """Each model's environment: its requirements resolved and downloaded for the target Python,
    every wheel unpacked into its own folder. `options`: the requirements_options setting."""
    files = requirement_files(repo, models)
    for path in files.values():
        problem = link_problem(path, repo.root)
        if problem:
            raise Refused(f"{problem}. Nothing was installed.")
    found = {}
    settings = pip_settings() if files else PipSettings()
    with progress.task("requirements", total=len(files), unit="models") as bar:
        for model, path in sorted(files.items()):
            bar.update(detail=f"{model}: resolving")
            pins = read_pins(model, path, options)
            wheels = download(path, pins, install, glibc, options, settings)
            distributions = []
            for number, wheel in enumerate(wheels, 1):
                bar.update(detail=f"{model}: unpacking {number} of {len(wheels)} distributions")
                distributions.append(unpack(wheel))
            found[model] = Environment(model, path, tuple(sorted(distributions)), install)
            bar.advance(detail="")
    return Environments(install.version, found)


# -- unpacked wheels, checked against the wheel they claim to be ----------------------------------

_SHA256: dict[tuple, str] = {}  # a wheel's (path, stat) -> its sha256: hashed once, however many models use it


def wheel_sha256(wheel: Path) -> str:
    """The wheel's sha256, read once per process for each file as it is (any change to the file
    changes its ctime, so a changed wheel is read again)."""
    stat = wheel.stat()
    key = (os.fspath(wheel), stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)
    if key not in _SHA256:
        with open(wheel, "rb") as handle:
            _SHA256[key] = hashlib.file_digest(handle, "sha256").hexdigest()
    return _SHA256[key]


def unpack(wheel: Path) -> Distribution:
    """The wheel's files as `pip install --target` lays them out (its .data purelib and platlib
    merged in; scripts, headers and data left out), in a folder named by the wheel's sha256.

    The folder is made once; once per run it is checked against the wheel itself (every file,
    its size, mode and RECORD hash, nothing more): the cache may come from anywhere. One that
    differs is discarded with a warning and made again."""
    try:
        name, version, _, _ = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename:
        raise Refused(f"{wheel}: pip gave a file that is not a wheel; remove it and run again.") from None
    sha = wheel_sha256(wheel)
    folder = cache_dir() / "dists" / sha
    if not checked(folder):
        try:
            with zipfile.ZipFile(wheel) as archive:
                expected = _expected(wheel, archive)
                if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                    discard(folder, f"is not a folder, though it claims to be {wheel.name} unpacked")
                elif (folder / ".complete").exists():
                    why = _differs(folder, expected, archive)
                    if why:
                        discard(folder, f"{why}, though it claims to be {wheel.name} unpacked")
                if not (folder / ".complete").exists():
                    with atomic_folder(folder) as partial:
                        _extract(archive, expected, partial)
                    why = _differs(folder, expected, archive)
                    if why:  # the wheel's own RECORD disagrees with its files
                        shutil.rmtree(folder, ignore_errors=True)
                        wheel.unlink(missing_ok=True)
                        raise Refused(f"""
                            {wheel.name} does not match its own RECORD (unpacked, it {why}): it is damaged or
                            was altered, and was removed from the store. Run again; if it happens again, pin
                            another version.""")
        except (zipfile.BadZipFile, EOFError):
            wheel.unlink(missing_ok=True)  # a download cut short: the next run fetches it again
            raise Refused(f"{wheel.name} is damaged (a download cut short?); it was removed: run again.") from None
        mark_checked(folder)
    return Distribution(canonicalize_name(name), str(version), sha, folder)


@dataclass(frozen=True)
class _File:
    """A file of the unpacked wheel, as the wheel says it is."""

    member: zipfile.ZipInfo
    executable: bool
    algorithm: str = ""  # RECORD's hash of it, urlsafe base64 without padding; "" when RECORD
    digest: str = ""  # gives none (then the wheel's own bytes are hashed)


_HASHES = {"sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b", "blake2s"}


def _expected(wheel: Path, archive: zipfile.ZipFile) -> dict[str, _File]:
    """The files of the wheel's folder (path in the folder -> what it must be): its members laid
    out as `pip install --target` does, with the hashes its RECORD gives them."""
    laid_out: dict[str, zipfile.ZipInfo] = {}
    for member in archive.infolist():
        parts = PurePosixPath(member.filename).parts
        if member.is_dir() or not parts:
            continue
        if member.filename.startswith("/") or ".." in parts or "\\" in member.filename:
            raise Refused(
                f"{wheel.name}: the wheel holds {member.filename!r}, a path outside its own "
                "folder; it is not installed. Pin another version."
            )
        if parts[0].endswith(".data"):
            if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                continue
            parts = parts[2:]
        if parts == (".complete",):
            continue  # the folder's own marker
        laid_out["/".join(parts)] = member
    recorded: dict[str, tuple[str, str]] = {}
    for record in [m for m in archive.infolist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", m.filename)]:
        text = archive.read(record).decode("utf-8", "replace")
        for row in text.splitlines():
            fields = row.rsplit(",", 2)
            algorithm, _, digest = fields[1].partition("=") if len(fields) == 3 else ("", "", "")
            if algorithm in _HASHES and digest:
                recorded[fields[0]] = (algorithm, digest)
    return {
        path: _File(member, bool((member.external_attr >> 16) & 0o111), *recorded.get(member.filename, ("", "")))
        for path, member in laid_out.items()
    }


def _differs(folder: Path, expected: dict[str, _File], archive: zipfile.ZipFile) -> str:
    """'' when `folder` holds exactly the expected files (each a regular file of the wheel's size,
    mode and hash, and nothing else but the folder's marker); else what differs, the first found."""
    seen: dict[str, Path] = {}
    for top, folders, names in os.walk(folder):
        for name in folders + names:
            path = Path(top, name)
            relative = path.relative_to(folder).as_posix()
            stat = path.lstat()
            if name in folders and not path.is_symlink():
                continue
            if relative == ".complete":
                continue
            if not S_ISREG(stat.st_mode):
                return f"holds {relative}, which is not a regular file"
            want = expected.get(relative)
            if want is None:
                return f"holds {relative}, which the wheel does not"
            if stat.st_size != want.member.file_size or bool(stat.st_mode & 0o100) != want.executable:
                return f"holds {relative} with another size or mode than the wheel's"
            seen[relative] = path
    missing = sorted(set(expected) - set(seen))
    if missing:
        return f"lacks {missing[0]}"
    for relative, path in sorted(seen.items()):
        want = expected[relative]
        algorithm = want.algorithm or "sha256"
        with open(path, "rb") as handle:
            found = hashlib.file_digest(handle, algorithm).digest()
        if want.digest:
            ok = base64.urlsafe_b64encode(found).rstrip(b"=").decode() == want.digest
        else:
            with cast(zipfile.ZipExtFile, archive.open(want.member)) as source:
                ok = hashlib.file_digest(source, algorithm).digest() == found
        if not ok:
            return f"holds {relative} with other bytes than the wheel's"
    return ""


def _extract(archive: zipfile.ZipFile, expected: dict[str, _File], dest: Path) -> None:
    for relative, want in sorted(expected.items()):
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(want.member) as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out)
        target.chmod(0o755 if want.executable else 0o644)


# -- console scripts --------------------------------------------------------------------------

_SCRIPT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
_ENTRY_POINT = re.compile(r"(?P<module>[A-Za-z_][\w.]*)\s*:\s*(?P<attr>[A-Za-z_][\w.]*)\s*(\[[^\]]*\])?")


@functools.lru_cache(maxsize=4096)
def console_scripts(folder: Path) -> dict[str, tuple[str, str]]:
    """The console and GUI scripts a distribution's entry points declare: name -> (module,
    attribute). Names that are not plain file names are left out."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(folder.glob("*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep their case
        try:
            parser.read_string(path.read_text(encoding="utf-8"))
        except (configparser.Error, UnicodeDecodeError, OSError):
            log.warning(f"{folder.name}: {path.parent.name}/entry_points.txt cannot be read; its scripts are left out")
            continue
        for section in ("console_scripts", "gui_scripts"):
            for name, value in parser.items(section) if parser.has_section(section) else []:
                match = _ENTRY_POINT.fullmatch(value.strip())
                if _SCRIPT_NAME.fullmatch(name) and match:
                    found[name] = (match.group("module"), match.group("attr"))
                else:
                    log.warning(
                        f"{path.parent.name}: the script {name!r} = {value.strip()!r} is left out "
                        "(not a plain name, or not module:function)"
                    )
    return found


def _script(python: str, target: tuple[str, str]) -> bytes:
    """A console script as pip writes it, run by `python` (a /bin/sh line starts it when the
    interpreter's path is too long for the kernel's #! line, as pip does)."""
    module, attr = target
    shebang = f"#!{python}" if len(python) <= 125 else f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''"
    return (
        f"{shebang}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module} import {attr.split('.')[0]}\n"
        f'if __name__ == "__main__":\n    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])\n'
        f"    sys.exit({attr}())\n"
    ).encode()


# -- in the image -----------------------------------------------------------------------------


def env_config(model_folder: Path, env: Environment) -> bytes:
    """The model's config.pbtxt as the image holds it: the user's text with the parameter
    appended (a model without one gets a config naming the backend only; Triton completes it)."""
    path = model_folder / CONFIG_FILE
    text = path.read_text(encoding="utf-8") if path.is_file() else 'backend: "python"\n'
    return (
        text.rstrip("\n") + f"\n\n# added by triton-release: the model's requirements.txt environment\n"
        f'parameters {{ key: "{ENV_PARAMETER}" value: {{ string_value: "/{env.in_image}" }} }}\n'
    ).encode()


def environment_items(envs: Environments, repo: Repository) -> tuple[list[Item], dict[str, dict[str, bytes]]]:
    """The image's part of the environments: one item per distribution and one per model's
    environment folder; and each model's config.pbtxt as the image holds it."""
    items = []
    for dist in envs.distributions:
        entries = {
            str(dist.in_image / p.relative_to(dist.folder).as_posix()): p
            for p in sorted(dist.folder.rglob("*"))
            if p.is_file() and p.name != ".complete"
        }
        items.append(
            Item(
                f"dist/{dist.ident}",
                entries,
                sum(p.stat().st_size for p in entries.values()),
                fingerprint=f"wheel-sha256:{dist.folder.name}",
            )
        )  # the folder is named by its wheel
    configs = {}
    for model, env in sorted(envs.by_model.items()):
        files = env.files()
        items.append(Item(f"env/{model}", files, sum(len(content) for content in files.values())))
        configs[model] = {CONFIG_FILE: env_config(repo[model].path, env)}
    return items, configs
