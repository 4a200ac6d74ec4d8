"""A command's peak resident memory, whatever the size of the process that measures it.

Linux keeps the largest resident size a process had across exec, and a process spawned from
another starts with that one's: wait4's ru_maxrss of a command spawned from a benchmark (or a
test worker) that had grown to 1.1 GiB read 1.1 GiB. So the command is forked from a small
launcher, which reports its child's peak.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measured(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, bytes, int]:
    """`command` run to its end: its seconds, exit code, output, and peak resident memory in bytes
    (its own and its descendants', the largest: wait4's ru_maxrss), whatever this process's size."""
    with tempfile.TemporaryDirectory(prefix="bench-peak-") as folder:
        peak_file = Path(folder) / "peak"
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", LAUNCHER, str(peak_file), *command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        elapsed = time.perf_counter() - start
        peak = int(peak_file.read_text()) if peak_file.exists() else 0
    return elapsed, done.returncode, done.stdout, peak
