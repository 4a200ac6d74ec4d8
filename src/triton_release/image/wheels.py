"""A wheel downloaded on the host once: pip fetches one binary wheel for a platform other than the
host's into a folder of the cache, and later calls take it from there.

pip's own settings apply (PIP_INDEX_URL, PIP_FIND_LINKS: a mirror of PyPI for an air-gapped runner).
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

from triton_release.errors import InfrastructureError

if TYPE_CHECKING:
    from pathlib import Path


def host_wheel(requirement: str, platform: str, folder: Path, pattern: str, failure: str) -> Path:
    """The wheel named by `pattern` (a glob; the last by name when several match) in `folder`, or
    `requirement` downloaded there for `platform` (without its dependencies) when none is. When pip
    fails or brings no such wheel: InfrastructureError with `failure` as its message and pip's last
    lines as its details."""
    found = sorted(folder.glob(pattern))
    if found:
        return found[-1]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            platform,
            "--python-version",
            "3.11",
            requirement,
            "-d",
            str(folder),
        ],
        capture_output=True,
        text=True,
    )
    found = sorted(folder.glob(pattern))
    if done.returncode != 0 or not found:
        raise InfrastructureError(failure, details=done.stderr.strip().splitlines()[-5:])
    return found[-1]
