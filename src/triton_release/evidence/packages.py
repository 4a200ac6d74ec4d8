"""The Python packages an image holds, for the SBOM: those its own Python sees (importlib.metadata)
and, in an image this tool built, each model environment's distributions (the folders its
triton-release.pth lists, named <name>-<version>-<12 hex of the wheel's sha256>).

One throwaway container (no network, removed at once) prints them; the answer is cached by image
id and Python, so a base image is read once, as its inspection is (image/base.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triton_release.cache import cache_dir
from triton_release.errors import TritonReleaseError
from triton_release.evidence.sbom import Package
from triton_release.files import write_atomic

if TYPE_CHECKING:
    import docker

CACHE_FORMAT = 1
log = logging.getLogger("triton_release")
_PROBE = r"""
import glob, json, os, sys
try:
    import importlib.metadata as metadata
except ImportError:
    metadata = None
system = []
for dist in (metadata.distributions() if metadata else []):
    try:
        name, version = dist.metadata["Name"], dist.version
    except Exception:
        continue
    if name:
        system.append([name, version or "", str(getattr(dist, "_path", "") or "")])
envs = {}
for pth in glob.glob("/opt/triton-release/envs/*/lib/python*/site-packages/triton-release.pth"):
    model = pth.split("/")[4]
    with open(pth) as handle:
        envs[model] = [os.path.basename(line.strip()) for line in handle if line.strip()]
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "system": system, "environments": envs}))
"""


@dataclass(frozen=True)
class ImagePackages:
    python: str
    system: tuple[Package, ...]
    environments: dict[str, tuple[Package, ...]]  # model -> its environment's distributions


def _from_folder(ident: str) -> Package | None:
    """A distribution folder's name, <name>-<version>-<12 hex> (image/environments.py), as a package."""
    name, _, rest = ident.rpartition("-")
    name, _, version = name.rpartition("-")
    if not (name and version and len(rest) == 12):
        return None
    return Package(name, version, sha256_prefix=rest)


def parse(text: str) -> ImagePackages:
    data = json.loads(text.strip().splitlines()[-1])
    system = tuple(sorted({Package(str(n), str(v), location=str(where)) for n, v, where in data.get("system", [])}))
    envs = {
        str(model): tuple(sorted(p for ident in idents if (p := _from_folder(str(ident))) is not None))
        for model, idents in (data.get("environments") or {}).items()
    }
    return ImagePackages(str(data.get("python", "")), system, envs)


def image_packages(client: docker.DockerClient, image: str, python: str = "python3") -> ImagePackages:
    """What `image` holds, run with its `python` (the stub's Python); cached by image id."""
    import docker

    from triton_release.image.base import run_probe

    ident = client.images.get(image).id
    cached = cache_dir() / "packages" / f"{ident.replace(':', '-')}-{python.replace('/', '_')}.v{CACHE_FORMAT}.json"
    if cached.exists():
        try:
            return parse(cached.read_text(encoding="utf-8"))
        except (ValueError, TypeError, KeyError, IndexError):
            pass
    try:
        output = run_probe(client, image, 'exec "$PY" -c "$PROBE"', {"PY": python, "PROBE": _PROBE})
    except (docker.errors.DockerException, TritonReleaseError) as exc:
        log.warning(
            f"the Python packages of {image} could not be listed ({exc}); the SBOM lists the model environments only"
        )
        return ImagePackages("", (), {})
    try:
        found = parse(output)
    except (ValueError, TypeError, KeyError, IndexError):
        return ImagePackages("", (), {})
    write_atomic(cached, output.strip().splitlines()[-1])
    return found
