"""Which Triton release a base image is, as the image itself says: never from a table of releases.

NVIDIA's images set `NVIDIA_TRITON_SERVER_VERSION` (the NGC release, `YY.MM`: the python_backend
branch `r<YY.MM>` a stub must come from) and `TRITON_SERVER_VERSION` (the Triton version) in their
environment, and the label `com.nvidia.tritonserver.version`; their OS says its release in
`/etc/os-release` (read by the base probe, image/base.py), and Ubuntu's own images in the labels
`org.opencontainers.image.ref.name` and `org.opencontainers.image.version`. These are read from a
local image's probe, or from the image configuration in the registry without a pull
(registry/sizes.py), and checked for their shape before any of them reaches git, a Dockerfile or
a path: a value of another shape counts as not said.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from triton_release.contract import looks_like_release

NGC_VARIABLE = "NVIDIA_TRITON_SERVER_VERSION"
TRITON_VARIABLE = "TRITON_SERVER_VERSION"
TRITON_LABEL = "com.nvidia.tritonserver.version"
OS_NAME_LABEL = "org.opencontainers.image.ref.name"
OS_VERSION_LABEL = "org.opencontainers.image.version"
# python_backend r25.xx and later need CMake 3.31.8 or newer (image/compiler.py installs it)
NEW_CMAKE_FROM = "25.01"
# the first release whose python_backend pins pybind11 2.12 (numpy 2 works with its stubs)
PYBIND11_212_FROM = (2, 52, 0)

RELEASE_SHAPE = re.compile(r"^\d\d\.\d\d$")
OS_SHAPE = re.compile(r"^[a-z0-9][a-z0-9._-]* [0-9][0-9.]*$")  # os-release's `ID VERSION_ID`


@dataclass(frozen=True)
class Release:
    """What a base image says it is. Each field is "" when the image does not say (or says it in
    a shape that is not a release's)."""

    ngc: str = ""  # YY.MM
    triton: str = ""  # X.Y.Z
    os: str = ""  # `ID VERSION_ID` of /etc/os-release, e.g. "ubuntu 24.04"

    def __post_init__(self) -> None:
        if self.ngc and not RELEASE_SHAPE.match(self.ngc):
            raise ValueError(f"ngc {self.ngc!r} is not YY.MM")
        if self.triton and not triton_version(self.triton):
            raise ValueError(f"triton {self.triton!r} is not X.Y.Z")
        if self.os and not OS_SHAPE.match(self.os):
            raise ValueError(f"os {self.os!r} is not `ID VERSION_ID`")

    @property
    def branch(self) -> str:
        """python_backend's branch for this release, "" when the image does not say its release."""
        return f"r{self.ngc}" if self.ngc else ""

    @property
    def needs_new_cmake(self) -> bool:
        return needs_new_cmake(self.ngc)

    def describe(self) -> str:
        """E.g. "Triton 2.71.0 (NGC 26.07, ubuntu 24.04)"."""
        said = [f"NGC {self.ngc}" if self.ngc else "NGC release not said", *([self.os] if self.os else [])]
        return f"Triton {self.triton or 'unknown'} ({', '.join(said)})"


def needs_new_cmake(release: str) -> bool:
    """Whether python_backend r<release> needs CMake 3.31.8 or newer (r25.xx on)."""
    return bool(RELEASE_SHAPE.match(release)) and release >= NEW_CMAKE_FROM


def triton_version(text: str) -> bool:
    """Whether `text` is a Triton version, X.Y.Z (the grammar of contract.py's release versions)."""
    return looks_like_release(text)


def shaped(value: object, shape: re.Pattern[str]) -> str:
    """`value` when it is a string of `shape`, else "" (not said)."""
    text = value.strip() if isinstance(value, str) else ""
    return text if shape.match(text) else ""


def environment(entries: Iterable[str] | None) -> dict[str, str]:
    """An image configuration's `Env` (["NAME=value", ...]) as a mapping."""
    found: dict[str, str] = {}
    for entry in entries or ():
        if isinstance(entry, str) and "=" in entry:
            name, _, value = entry.partition("=")
            found[name] = value
    return found


def from_config(env: Mapping[str, str], labels: Mapping[str, str] | None = None, os: str = "") -> Release:
    """The release an image's environment and labels say; `os` as the probe read /etc/os-release
    (else from Ubuntu's labels)."""
    labels = labels or {}
    said = [v.strip() for v in (env.get(TRITON_VARIABLE), labels.get(TRITON_LABEL)) if isinstance(v, str)]
    triton = next((v for v in said if triton_version(v)), "")
    found_os = shaped(os, OS_SHAPE)
    if not found_os and labels.get(OS_NAME_LABEL) == "ubuntu":
        found_os = shaped(f"ubuntu {labels.get(OS_VERSION_LABEL, '')}", OS_SHAPE)
    return Release(shaped(env.get(NGC_VARIABLE), RELEASE_SHAPE), triton, found_os)


def unsaid(image: str) -> str:
    """Why a source stub cannot be planned for an image that does not say its NGC release, and the fix."""
    return (
        f"{image} does not say its NGC release ({NGC_VARIABLE}=<YY.MM> in its environment, as NVIDIA's "
        f"images set it), so the python_backend branch r<YY.MM> to build is unknown; base the image on "
        f"nvcr.io/nvidia/tritonserver:<YY.MM>-py3, or set ENV {NGC_VARIABLE}=<YY.MM> in the Dockerfile "
        "that makes it"
    )
