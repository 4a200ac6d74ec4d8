"""The tool run as a user runs it: `python -m triton_release` in a process of its own, on the
stand-in base image."""

from __future__ import annotations

import subprocess
import sys

from support.stack import BASE_IMAGE


def tool_command(*args: str) -> list[str]:
    """`triton-release *args`, with this test run's Python."""
    return [sys.executable, "-m", "triton_release", *args]


def release_command(target: str, *extra: str) -> list[str]:
    """`triton-release release --to target --base-image <the stand-in> *extra`."""
    return tool_command("release", "--to", target, "--base-image", BASE_IMAGE, *extra)


def start(command: list[str], *, cwd=None, env: dict | None = None) -> subprocess.Popen:
    """`command` started, its stdout and stderr read together as one text pipe (`.stdout`)."""
    return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
