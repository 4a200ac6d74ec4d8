"""The `source` stub: compiled from python_backend's sources in a builder stage FROM the base
image, once per set of inputs that determine it, and kept in the cache folder.

What determines a compiled stub is its key: the base image's id (its OS, and the compiler and
Boost its package manager installs), the target Python, each source's ref and commit
(python_backend, common, core, backend, pybind11, dlpack, googletest), where Boost comes from, and
the builder stage's text. A release with the same inputs takes the stub from the cache and
compiles nothing. The cache folder may come from anywhere (actions/cache, another run): an entry is
checked against the digest it records (and its inputs against the key's) once per run before it
is used, and one that does not match is discarded and compiled again.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shlex
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import docker

from triton_release import progress
from triton_release.cache import cache_dir, checked, discard, exclusive, mark_checked
from triton_release.errors import InfrastructureError, Refused
from triton_release.files import atomic_folder
from triton_release.image.ngc import RELEASE_SHAPE, needs_new_cmake
from triton_release.image.sources import Origin, Source, Unavailable, gather
from triton_release.image.wheels import host_wheel
from triton_release.processes import owner_labels

if TYPE_CHECKING:
    from collections.abc import Iterable

STUB_NAME = "triton_python_backend_stub"
FACTS_NAME = "stub.json"
STAGE = "stub-builder"
ESTIMATE = "about 2 to 5 minutes"  # a cold build on 2 cores: 2 min (95 s of it compiling); 1 core: 4 to 5
# Replaces only python_backend's download of Boost (an ExternalProject named boostorg, URL and
# hash pinned) with the build image's own headers, as CMAKE_PROJECT_tritonpythonbackend_INCLUDE:
# no source is patched. Shaped as upstream's: the headers copied to <build>/boost.
SYSTEM_BOOST_CMAKE = """include(ExternalProject)
function(ExternalProject_Add name)
  if(name STREQUAL "boostorg")
    _ExternalProject_Add(boostorg
      DOWNLOAD_COMMAND ""
      SOURCE_DIR /usr/include
      PREFIX "boost-src"
      CONFIGURE_COMMAND ${CMAKE_COMMAND} -E copy_directory /usr/include/boost/ ${CMAKE_BINARY_DIR}/boost
      BUILD_COMMAND ""
      INSTALL_COMMAND "")
  else()
    _ExternalProject_Add(${name} ${ARGN})
  endif()
endfunction()
"""
# python_backend r25.xx and later need CMake 3.31.8 or newer (image/ngc.py's NEW_CMAKE_FROM), which
# Ubuntu 24.04 (NGC's base since 24.11) does not package: PyPI's cmake wheel, downloaded on the host
# and unpacked in the stage.
CMAKE_REQUIREMENT = "cmake>=3.31.8,<4"
CMAKE_PLATFORM = "manylinux2014_x86_64"
_STEP = re.compile(r"^Step (\d+)/(\d+) : (\w+)")
_PERCENT = re.compile(r"^\[\s*(\d+)%\]")


@dataclass(frozen=True)
class StubBuild:
    """What a source stub is compiled from, all of it checked to be there."""

    base_image: str
    base_image_id: str
    ngc_release: str
    python: str
    origin: Origin
    sources: tuple[Source, ...]

    def __post_init__(self) -> None:
        # both go into the builder stage's shell commands: of their shape only
        if not RELEASE_SHAPE.match(self.ngc_release):
            raise ValueError(f"NGC release {self.ngc_release!r} is not YY.MM")
        if not re.fullmatch(r"\d+\.\d+", self.python):
            raise ValueError(f"Python {self.python!r} is not X.Y")

    @property
    def branch(self) -> str:
        return f"r{self.ngc_release}"

    def source(self, name: str) -> Source:
        return next(s for s in self.sources if s.name == name)

    @property
    def boost(self) -> str:
        return (
            "the build image's libboost-dev"
            if self.origin.boost == "system"
            else "Boost 1.79 from archives.boost.io (python_backend's pin)"
        )

    def stage(self, base_image: str | None = None) -> str:
        return builder_stage(base_image or self.base_image, self.python, self.sources, self.origin.boost)

    @property
    def inputs(self) -> dict:
        return {
            "base_image_id": self.base_image_id,
            "python": self.python,
            "boost": self.origin.boost,
            "sources": {s.name: {"ref": s.ref, "commit": s.commit} for s in self.sources},
            # the stage's text with the base named by id above, not by the name given
            "stage": hashlib.sha256(self.stage("BASE").encode()).hexdigest(),
        }

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.inputs, sort_keys=True).encode()).hexdigest()[:24]

    @property
    def entry(self) -> Path:
        return cache_dir() / "stubs" / "compiled" / self.key

    def origin_text(self) -> str:
        backend = self.source("python_backend")
        return f"python_backend {backend.ref} ({backend.commit[:12]}) from {self.origin.describe()}"

    def to_json(self) -> dict:
        return {
            "from": self.origin.given or "github",
            "branch": self.branch,
            "boost": self.origin.boost,
            "cache_key": self.key,
            "sources": {s.name: s.to_json() for s in self.sources},
        }


def builder_stage(base_image: str, python: str, sources: Iterable[Source], boost: str) -> str:
    """A Dockerfile stage compiling the stub for `python` from the sources in the context's
    `sources/` folder (image/sources.py's `gather`): nothing is fetched but the build tools
    (apt-get) and, with `boost` "upstream", python_backend's own Boost download."""
    found = {s.name: s for s in sources}
    tags = " ".join(
        f"-DTRITON_{repo}_REPO_TAG={shlex.quote(found[repo.lower()].branch)}" for repo in ("BACKEND", "COMMON", "CORE")
    )
    if not re.fullmatch(r"\d+\.\d+", python):
        raise ValueError(f"Python {python!r} is not X.Y")
    clones = " \\\n && ".join(
        f"git clone -q -b {shlex.quote(found[name].branch)} /sources/{name}.git /src/{name}"
        for name in ("python_backend", "pybind11", "dlpack", "googletest")
    )
    release = found["python_backend"].ref.removeprefix("r")
    new_cmake = (
        "RUN python3 -m zipfile -e /sources/cmake.whl /opt/cmake-wheel \\\n"
        " && chmod +x /opt/cmake-wheel/cmake/data/bin/* \\\n"
        " && ln -sf /opt/cmake-wheel/cmake/data/bin/cmake /usr/local/bin/cmake\n"
        if needs_new_cmake(release)
        else ""
    )
    boost_package = " libboost-dev" if boost == "system" else ""
    boost_flag = " -DCMAKE_PROJECT_tritonpythonbackend_INCLUDE=/sources/system-boost.cmake" if boost == "system" else ""
    return f"""FROM {base_image} AS {STAGE}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      ca-certificates git cmake make g++ rapidjson-dev libarchive-dev zlib1g-dev python{python}-dev{boost_package}
COPY sources /sources
{new_cmake}RUN {clones} \\
 && gpu=$([ -d /usr/local/cuda/include ] && echo ON || echo OFF) \\
 && cmake -S /src/python_backend -B /build -DTRITON_ENABLE_GPU=$gpu \\
      -DTRITON_REPO_ORGANIZATION=file:///sources {tags} \\
      -DFETCHCONTENT_SOURCE_DIR_PYBIND11=/src/pybind11 -DFETCHCONTENT_SOURCE_DIR_DLPACK=/src/dlpack \\
      -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/src/googletest{boost_flag} \\
      -DPython3_EXECUTABLE=/usr/bin/python{python} -DPYTHON_EXECUTABLE=/usr/bin/python{python}
RUN make -C /build -j"$(nproc)" triton-python-backend-stub \\
 && echo "boost $(cat /build/boost/version.hpp /build/boost/boost/version.hpp /usr/include/boost/version.hpp \\
      2>/dev/null | sed -n 's/^#define BOOST_LIB_VERSION "\\(.*\\)"/\\1/p' | head -n 1)" > /build/stub-facts.txt \\
 && echo "compiler $(c++ --version | head -n 1)" >> /build/stub-facts.txt
"""


def cmake_wheel(folder: Path) -> Path:
    """PyPI's cmake wheel (3.31.8 or newer, before 4) in `folder`, downloaded on the host with pip
    once (pip's own settings, such as PIP_INDEX_URL, apply: a mirror of PyPI for an air-gapped
    runner)."""
    return host_wheel(
        CMAKE_REQUIREMENT,
        CMAKE_PLATFORM,
        folder,
        "cmake-3.*.whl",
        f"""
        python_backend r25.xx and later need CMake 3.31.8 or newer, and {CMAKE_REQUIREMENT} could
        not be downloaded from PyPI. Check the network and pip's index settings (PIP_INDEX_URL,
        PIP_FIND_LINKS), or give a stub with --stub path:FILE.""",
    )


@dataclass(frozen=True)
class Compiled:
    path: Path
    compiled: bool  # False: taken from the cache
    facts: dict  # boost, compiler, seconds: what the compile recorded


def cached(build: StubBuild) -> Compiled | None:
    """The stub compiled earlier from the same inputs, checked against its recorded digest (once
    per run); None when there is none, or it was discarded."""
    entry = build.entry
    stub, facts_file = entry / STUB_NAME, entry / FACTS_NAME
    if not facts_file.is_file():
        return None
    try:
        facts = json.loads(facts_file.read_text(encoding="utf-8"))
        digest = facts["sha256"]
        same = facts["inputs"] == build.inputs
    except (OSError, ValueError, KeyError, TypeError):
        discard(entry, "cannot be read as a compiled stub's record")
        return None
    if not checked(entry):
        if not same:
            discard(entry, "records other inputs than its key's")
            return None
        try:
            actual = hashlib.sha256(stub.read_bytes()).hexdigest()
        except OSError:
            actual = "(missing)"
        if actual != digest:
            discard(entry, f"holds a stub whose sha256 is {actual[:16]}, not the {str(digest)[:16]} it records")
            return None
        mark_checked(entry)
    return Compiled(stub, False, facts)


def compile_stub(client: docker.DockerClient, build: StubBuild) -> Compiled:
    """The stub for `build`: from the cache, else compiled in its builder stage (the sources
    gathered into the build's context first) and kept in the cache."""
    with exclusive(f"stub {build.key}"):
        found = cached(build)
        if found is not None:
            return found
        started = time.monotonic()
        with progress.task("stub", total=100, unit="%") as bar:
            bar.update(
                0,
                detail=f"compiling {build.origin_text()} for Python {build.python}: {ESTIMATE}, once (then cached)",
            )
            with tempfile.TemporaryDirectory(prefix="triton-release-stub-") as scratch:
                context = _context(build, Path(scratch))
                image_id = _build(client, context, bar)
            try:
                data, recorded = _copy_out(client, image_id)
            finally:
                _remove_image(client, image_id)
            bar.update(100, detail="compiled")
        facts = {
            "inputs": build.inputs,
            "sha256": hashlib.sha256(data).hexdigest(),
            **recorded,
            "seconds": round(time.monotonic() - started, 1),
            "origin": build.origin_text(),
        }
        with atomic_folder(build.entry) as partial:
            (partial / STUB_NAME).write_bytes(data)
            (partial / STUB_NAME).chmod(0o755)
            (partial / FACTS_NAME).write_text(json.dumps(facts, indent=1, sort_keys=True), encoding="utf-8")
        mark_checked(build.entry)
        return Compiled(build.entry / STUB_NAME, True, facts)


def _context(build: StubBuild, scratch: Path) -> Path:
    """The build's context as a tar: the stage, the sources one commit deep, the Boost include,
    and for r25.xx on PyPI's cmake wheel."""
    sources = scratch / "sources"
    try:
        gather(build.origin, build.sources, sources)
    except Unavailable as exc:
        raise InfrastructureError(
            f"""
            The stub's sources could not be fetched: {exc}. Nothing was built. Check stub_sources
            (--stub-sources), or give a stub with --stub path:FILE."""
        ) from None
    (sources / "system-boost.cmake").write_text(SYSTEM_BOOST_CMAKE, encoding="utf-8")
    if needs_new_cmake(build.ngc_release):
        shutil.copyfile(cmake_wheel(cache_dir() / "wheels"), sources / "cmake.whl")
    (scratch / "Dockerfile").write_text(build.stage(), encoding="utf-8")
    context = scratch / "context.tar"
    with tarfile.open(context, "w") as tar:
        tar.add(scratch / "Dockerfile", "Dockerfile")
        tar.add(sources, "sources")
    return context


def _build(client: docker.DockerClient, context: Path, bar: progress.Task) -> str:
    """Run the stage with the classic builder, its steps and make's percentage as progress."""
    log: list[str] = []
    image_id = ""
    try:
        with open(context, "rb") as fileobj:
            stream = client.api.build(
                fileobj=fileobj,
                custom_context=True,
                target=STAGE,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                labels=owner_labels(),
            )
            for chunk in stream:
                if "error" in chunk:
                    log.append(str(chunk["error"]))
                    _failed(log)
                image_id = (chunk.get("aux") or {}).get("ID", image_id)
                for line in str(chunk.get("stream", "")).splitlines():
                    log.append(line)
                    if step := _STEP.match(line):
                        bar.update(detail=f"step {step[1]} of {step[2]} ({step[3]})")
                    elif percent := _PERCENT.match(line):
                        bar.update(int(percent[1]), detail=f"make {percent[1]}%")
    except docker.errors.APIError as exc:
        raise InfrastructureError(
            f"The Docker daemon failed while compiling the stub: {exc.explanation or exc}"
        ) from None
    if not image_id:
        _failed(log)
    return image_id


def _failed(log: list[str]) -> None:
    text = "\n".join(log)
    tail = [line for line in log if line.strip()][-12:]
    if "archives.boost.io" in text and ("Could not resolve" in text or "Couldn't resolve" in text or "HTTP" in text):
        raise InfrastructureError(
            """
            The stub's builder stage could not download Boost from archives.boost.io (python_backend's
            own download). Build where it is reachable, or give stub_sources (--stub-sources) a folder of
            mirrors: Boost then comes from the build image's libboost-dev.""",
            details=tail,
        )
    if "apt-get" in text and ("Temporary failure resolving" in text or "Could not resolve" in text):
        raise InfrastructureError(
            """
            The stub's builder stage could not reach the base image's package mirror (apt-get) for the
            compiler and headers. Build where it is reachable, or give a stub with --stub path:FILE.""",
            details=tail,
        )
    raise Refused(
        """
        Compiling the stub failed (the builder stage's last lines are above). Nothing was built.
        Check that the base image can install cmake, g++ and python3.X-dev, or give a stub with
        --stub path:FILE.""",
        details=tail,
    )


def _copy_out(client: docker.DockerClient, image_id: str) -> tuple[bytes, dict]:
    container = client.containers.create(image_id, command=["true"], entrypoint=[], labels=owner_labels())
    try:
        files = {}
        for name in (STUB_NAME, "stub-facts.txt"):
            stream, _ = container.get_archive(f"/build/{name}")
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = tar.extractfile(name)
                assert member is not None
                files[name] = member.read()
    finally:
        container.remove(force=True)
    recorded = dict(line.split(" ", 1) for line in files["stub-facts.txt"].decode().splitlines() if " " in line.strip())
    return files[STUB_NAME], recorded


def _remove_image(client: docker.DockerClient, image_id: str) -> None:
    """The builder's image is of no use once the stub is in the cache (it is a few hundred MB)."""
    with contextlib.suppress(docker.errors.APIError):  # a leftover builder image is harmless
        client.images.remove(image_id, force=True)
