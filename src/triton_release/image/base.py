"""What a Triton base image holds: its Triton version, its Pythons, and what its stub links.

One throwaway container (no network, removed at once) runs a shell script that prints one
JSON object per line; the result is cached by image id, so a base is inspected once.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import docker

from triton_release.cache import cache_dir
from triton_release.contract import PROBE_LABEL, RUN_ID_VARIABLE
from triton_release.errors import InfrastructureError, Refused
from triton_release.files import write_atomic
from triton_release.image.ngc import NGC_VARIABLE, RELEASE_SHAPE, TRITON_VARIABLE, Release, from_config, triton_version
from triton_release.models.config.backends import PLATFORMS
from triton_release.processes import owner_labels, remove_by_name

if TYPE_CHECKING:
    from triton_release.models.repository import Model

BACKENDS_DIR = "/opt/tritonserver/backends"
STUB_PATH = f"{BACKENDS_DIR}/python/triton_python_backend_stub"
CACHE_FORMAT = 3  # 2: the backends folder's entries; 3: the OS release

# Each Python found prints one JSON line; the shell finds the interpreters and the stub.
_PYTHON_PROBE = r"""
import json, os, site, sys, sysconfig
soname = sysconfig.get_config_var("INSTSONAME") or ""
dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
dirs += [sysconfig.get_config_var("LIBDIR") or "", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
         "/usr/local/lib", "/usr/lib", "/lib"]
libpython = next((os.path.realpath(os.path.join(d, soname)) for d in dirs
                  if soname.endswith(".so.1.0") and os.path.exists(os.path.join(d, soname))), "")
try:
    import numpy
    numpy_version = numpy.__version__
except Exception:
    numpy_version = ""
sites = [p for p in site.getsitepackages() if p.startswith("/usr/local")] or site.getsitepackages()
print(json.dumps({"python": {"version": "%d.%d" % sys.version_info[:2], "executable": sys.executable,
                              "soname": soname, "libpython": libpython, "site_packages": sites[0],
                              "numpy": numpy_version}}))
"""

_SCRIPT = r"""
printf '{"env": {"triton": "%s", "ngc": "%s"}}\n' "$(printf %s "${TRITON_SERVER_VERSION:-}" | tr -cd 'A-Za-z0-9._+-')" \
  "$(printf %s "${NVIDIA_TRITON_SERVER_VERSION:-}" | tr -cd 'A-Za-z0-9._+-')"
printf '{"python3": "%s"}\n' "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)"
printf '{"os": "%s"}\n' "$( (. /etc/os-release && echo "$ID $VERSION_ID") 2>/dev/null | tr -cd 'a-z0-9._ -')"
printf '{"glibc": "%s"}\n' "$(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/glibc //')"
if [ -d "$BACKENDS" ]; then printf '{"backends": "%s"}\n' "$(ls -1 "$BACKENDS" 2>/dev/null | tr '\n' ' ')"; fi
for exe in /usr/bin/python3.* /usr/local/bin/python3.*; do
  case "${exe##*/}" in python3.[0-9]|python3.[0-9][0-9]) ;; *) continue ;; esac
  [ -x "$exe" ] && "$exe" -c "$PROBE" 2>/dev/null
done
echo '{"ldd": "begin"}'
if [ -e "$STUB" ]; then ldd "$STUB" 2>&1; else echo "no stub at $STUB"; fi
"""

_NEEDS = re.compile(r"^\s*(libpython(\d)(?:-[0-9a-f]+)?\.(\d+)\S*\.so[.\d]*)\s*(?:=>\s*(\S+))?")


@dataclass(frozen=True)
class PythonInstall:
    version: str  # X.Y
    executable: str
    soname: str  # libpython3.X.so.1.0 (the name a stub links)
    libpython: str  # where that library is, "" when the image lacks it
    site_packages: str  # where requirements are installed
    numpy: str  # numpy's version, "" when absent


@dataclass(frozen=True)
class StubLinks:
    present: bool
    libpython: str  # the libpython name the stub needs, e.g. libpython3.8.so.1.0
    python: str  # X.Y that name is for
    resolved_to: str  # where the loader finds it, "" when not found
    missing: tuple[str, ...]  # every library the loader cannot find
    ldd: str = field(repr=False, default="")

    @property
    def loads(self) -> bool:
        return self.present and not self.missing


def parse_ldd(text: str) -> StubLinks:
    if text.startswith("no stub at"):
        return StubLinks(False, "", "", "", (), text)
    libpython = python = resolved = ""
    missing = []
    for line in text.splitlines():
        if "not found" in line:
            missing.append(line.split("=>")[0].strip())
        match = _NEEDS.match(line)
        if match:
            libpython, python = match.group(1), f"{match.group(2)}.{match.group(3)}"
            resolved = "" if "not found" in line else (match.group(4) or "")
    return StubLinks(True, libpython, python, resolved, tuple(missing), text)


@dataclass(frozen=True)
class BaseImage:
    image: str
    image_id: str
    triton_version: str
    ngc_release: str
    python3: str  # what `python3` runs, X.Y
    glibc: str
    pythons: dict[str, PythonInstall]  # X.Y -> install
    stub: StubLinks
    layers: int = 0  # the image's own layers, counted in the layer budget
    backends: tuple[str, ...] | None = None  # the folders of /opt/tritonserver/backends; None: no such folder
    os: str = ""  # `ID VERSION_ID` of its /etc/os-release, e.g. "ubuntu 24.04"; "" when it has none

    def __post_init__(self) -> None:
        # what the image says goes into git refs, a Dockerfile and paths: of its shape, or not said
        if self.triton_version and not triton_version(self.triton_version):
            raise ValueError(f"{self.image}: Triton version {self.triton_version!r} is not X.Y.Z")
        if self.ngc_release and not RELEASE_SHAPE.match(self.ngc_release):
            raise ValueError(f"{self.image}: NGC release {self.ngc_release!r} is not YY.MM")
        if self.python3 and not re.fullmatch(r"\d+\.\d+", self.python3):
            raise ValueError(f"{self.image}: python3 {self.python3!r} is not X.Y")
        for version in self.pythons:
            if not re.fullmatch(r"\d+\.\d+", version):
                raise ValueError(f"{self.image}: Python {version!r} is not X.Y")
        Release(self.ngc_release, self.triton_version, self.os)  # the OS's shape

    @property
    def release(self) -> Release:
        """The Triton release the image says it is (image/ngc.py)."""
        return Release(self.ngc_release, self.triton_version, self.os)

    def to_json(self) -> dict:
        data = asdict(self)
        data["stub"].pop("ldd")
        return data

    @classmethod
    def from_json(cls, data: dict) -> BaseImage:
        pythons = {k: PythonInstall(**v) for k, v in data["pythons"].items()}
        stub = data["stub"]
        stub = StubLinks(**{**stub, "missing": tuple(stub["missing"])})
        backends = data.get("backends")
        backends = tuple(backends) if isinstance(backends, (list, tuple)) else None
        return cls(**{**data, "pythons": pythons, "stub": stub, "backends": backends})


def parse_probe(image: str, image_id: str, output: str) -> BaseImage:
    env: dict = {}
    python3 = glibc = os_release = ""
    backends: tuple[str, ...] | None = None
    pythons: dict[str, PythonInstall] = {}
    lines = output.splitlines()
    for index, line in enumerate(lines):
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if "env" in item:
            env = item["env"]
        elif "python3" in item:
            python3 = item["python3"]
        elif "glibc" in item:
            glibc = item["glibc"]
        elif "os" in item:
            os_release = item["os"]
        elif "backends" in item:
            backends = tuple(sorted(item["backends"].split()))
        elif "python" in item:
            found = PythonInstall(**item["python"])
            pythons.setdefault(found.version, found)
        elif item.get("ldd") == "begin":
            stub = parse_ldd("\n".join(lines[index + 1 :]))
            break
    else:
        stub = StubLinks(False, "", "", "", ())
    said = from_config({TRITON_VARIABLE: env.get("triton", ""), NGC_VARIABLE: env.get("ngc", "")}, os=os_release)
    python3 = python3 if re.fullmatch(r"\d+\.\d+", python3) else ""
    pythons = {version: found for version, found in pythons.items() if re.fullmatch(r"\d+\.\d+", version)}
    return BaseImage(
        image, image_id, said.triton, said.ngc, python3, glibc, pythons, stub, backends=backends, os=said.os
    )


def run_probe(client: docker.DockerClient, image: str, script: str, env: dict[str, str]) -> str:
    """Run `script` with /bin/sh in a throwaway container of `image`, no network; its output."""
    name = f"triton-release-probe-{uuid.uuid4().hex[:12]}"  # known before it exists: removed by it
    container = None
    try:
        container = client.containers.create(
            image,
            entrypoint=["/bin/sh", "-c", script],
            environment=env,
            network_disabled=True,
            name=name,
            labels={PROBE_LABEL: os.environ.get(RUN_ID_VARIABLE) or "1", **owner_labels()},
        )
        container.start()
        status = container.wait().get("StatusCode", 1)
        output = container.logs(stdout=True, stderr=False)
        if status != 0:
            errors = container.logs(stdout=False, stderr=True).decode(errors="replace").splitlines()[-5:]
            raise Refused(
                f"Inspecting {image} failed: /bin/sh exited with {status}. Is it a Linux image with a shell?",
                details=errors,
            )
    except docker.errors.ImageNotFound:
        raise Refused(f"""
            The base image {image} is not on this Docker host and cannot be pulled. Pull or build it
            first, or give another with --base-image.""") from None
    except docker.errors.APIError as exc:
        raise InfrastructureError(
            f"The Docker daemon failed while inspecting {image}: {exc.explanation or exc}"
        ) from None
    finally:  # whatever stopped the probe (a signal too, even one during its create): never left behind
        remove_by_name(client, name, created=container is not None)
    return output.decode("utf-8", errors="replace")


def image_id(client: docker.DockerClient, image: str) -> str:
    try:
        return client.images.get(image).id
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:
        raise InfrastructureError(
            f"The Docker daemon failed while looking up {image}: {exc.explanation or exc}"
        ) from None
    try:
        return client.images.pull(image).id
    except docker.errors.APIError:
        raise Refused(f"""
            The base image {image} is neither on this Docker host nor pullable. Pull it (with
            `docker login` first for nvcr.io), or give another with --base-image.""") from None


def layer_count(client: docker.DockerClient, image: str) -> int:
    """The layers of a local image (its root file system's diff ids)."""
    try:
        return len(client.images.get(image).attrs["RootFS"]["Layers"])
    except docker.errors.APIError as exc:
        raise InfrastructureError(
            f"The Docker daemon failed while looking up {image}: {exc.explanation or exc}"
        ) from None


def _cache_file(ident: str) -> Path:
    return cache_dir() / "inspect" / f"{ident.replace(':', '-')}.v{CACHE_FORMAT}.json"


def cached(image: str, ident: str) -> BaseImage | None:
    """The inspection of the image `ident` (named `image`) this machine's cache holds, else None."""
    path = _cache_file(ident)
    if not path.exists():
        return None
    try:
        return BaseImage.from_json({**json.loads(path.read_text()), "image": image})
    except (ValueError, TypeError, KeyError):
        return None


def inspect(client: docker.DockerClient, image: str) -> BaseImage:
    """The base image's Triton, Pythons, stub and layer count; cached by image id."""
    ident = image_id(client, image)
    cached_file = _cache_file(ident)
    found_cached = cached(image, ident)
    if found_cached is not None:  # a cache written before the layer count was kept lacks it
        return found_cached if found_cached.layers else replace(found_cached, layers=layer_count(client, ident))
    output = run_probe(client, image, _SCRIPT, {"PROBE": _PYTHON_PROBE, "STUB": STUB_PATH, "BACKENDS": BACKENDS_DIR})
    found = replace(parse_probe(image, ident, output), layers=layer_count(client, ident))
    write_atomic(cached_file, json.dumps(found.to_json()))
    return found


def check_stub(client: docker.DockerClient, image: str) -> StubLinks:
    """ldd of the stub inside `image` (the built one, after the build)."""
    return parse_ldd(
        run_probe(
            client,
            image,
            'if [ -e "$STUB" ]; then ldd "$STUB" 2>&1; else echo "no stub at $STUB"; fi',
            {"STUB": STUB_PATH},
        )
    )


def model_backend(model: Model) -> str | None:
    """The backend that serves a model (models/repository.Model): its config's backend, else the
    one of its platform; python for a model without config.pbtxt; None for an ensemble (the
    server itself runs it) or a platform this tool does not know."""
    config = model.config
    if config is None or model.is_python:  # no backend beside model.py: Triton takes python
        return "python"
    if config.backend:
        return config.backend
    return PLATFORMS.get(config.platform)


def require_backends(base: BaseImage, models: Iterable[Model]) -> None:
    """Refuse, before anything is built or served, models whose backend the base image lacks:
    tritonserver would fail to load them, and the failure would look like the model's own. A model
    that brings its backend (libtriton_<backend>.so in its folder or a version folder) is left
    alone, as Triton looks there first; so is a base without the backends folder (not told)."""
    if base.backends is None:
        return
    lacking: dict[str, list[str]] = {}
    for model in models:
        backend = model_backend(model)
        if backend is None or backend in base.backends:
            continue
        library = f"libtriton_{backend}.so"
        if (model.path / library).is_file() or any((model.path / str(v) / library).is_file() for v in model.versions):
            continue
        lacking.setdefault(backend, []).append(model.name)
    if not lacking:
        return
    which = "; ".join(
        f"{', '.join(names)} need{'s' if len(names) == 1 else ''} the {b} backend"
        for b, names in sorted(lacking.items())
    )
    raise Refused(f"""
        The base image {base.image} lacks a backend the models need: {which}, and its
        {BACKENDS_DIR} holds only {", ".join(base.backends) or "nothing"}. Give a base image that has
        {"them" if len(lacking) > 1 else "it"} with --base-image (base_image: in triton-release.yaml; NVIDIA's
        nvcr.io/nvidia/tritonserver:<YY.MM>-py3 ships the python, onnxruntime, pytorch, tensorrt and
        other backends), or remove those models from the model repository.""")
