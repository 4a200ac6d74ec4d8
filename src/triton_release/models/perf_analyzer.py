"""NVIDIA's perf_analyzer, as the latency gate runs it: finding it, its libraries, the
`--input-data` JSON made from a workload (models/workload.py), one measurement and its CSV.

perf_analyzer ships as `bin/perf_analyzer` in the tritonclient 2.51.0 wheel (later wheels no longer
carry it). It needs libb64.so.0d (Debian's libb64-0d) and libcudart.so.12 (PyPI's
nvidia-cuda-runtime-cu12, in `nvidia/cuda_runtime/lib` of wherever pip put it), found through
LD_LIBRARY_PATH; no GPU. The action's image installs both into their own prefix, /opt/perf_analyzer
(`pip install --target`), apart from the tool's own locked tritonclient.

Found, in this order: the `perf_analyzer` setting (a file), `perf_analyzer` on PATH, the action
image's prefix. Its libraries: the environment's LD_LIBRARY_PATH, plus the cuda_runtime folder of
its own prefix (beside its bin/, or in that prefix's site-packages).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from triton_release.models.tensors import FLOATS
from triton_release.models.workload import Workload

NAME = "perf_analyzer"
IMAGE_PREFIX = Path("/opt/perf_analyzer")  # the action image's (Dockerfile)
TRITONCLIENT = "2.51.0"
CUDA_RUNTIME = "12.6.77"
HOW_TO_GET = (
    f"perf_analyzer ships in the tritonclient {TRITONCLIENT} wheel: install it into a folder of its "
    f"own with `pip install --target ~/perf_analyzer --no-deps tritonclient=={TRITONCLIENT} "
    f"nvidia-cuda-runtime-cu12=={CUDA_RUNTIME}` and `apt-get install libb64-0d`, then give "
    "--perf-analyzer ~/perf_analyzer/bin/perf_analyzer (perf_analyzer: in triton-release.yaml) or put "
    "that bin/ on PATH. The action's image has it"
)


class PerfAnalyzerMissing(Exception):
    """perf_analyzer cannot be found or does not run here; the message says how to get it."""


@dataclass(frozen=True)
class PerfAnalyzer:
    path: Path
    version: str  # "2.51.0", as it prints it
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # what it runs with

    def run(self, args: list[str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.path), *args],
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def to_json(self) -> dict:
        return {"path": str(self.path), "version": self.version}


def find(given: str | None, env: Mapping[str, str]) -> PerfAnalyzer:
    """perf_analyzer as the setting names it, else on PATH, else in the action image's prefix,
    checked to run (`--version`) with its libraries. PerfAnalyzerMissing says why not, and how to
    get it."""
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise PerfAnalyzerMissing(f"perf_analyzer {given} (the perf_analyzer setting) is not a file. {HOW_TO_GET}.")
    else:
        found = shutil.which(NAME, path=env.get("PATH", os.defpath))
        path = Path(found) if found else IMAGE_PREFIX / "bin" / NAME
        if not path.is_file():
            raise PerfAnalyzerMissing(
                f"perf_analyzer was not found: not on PATH, not in {IMAGE_PREFIX}, and "
                f"no perf_analyzer setting. {HOW_TO_GET}."
            )
    analyzer = PerfAnalyzer(path.absolute(), "", _environment(path, env))
    try:
        answer = analyzer.run(["--version"], timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PerfAnalyzerMissing(f"{path} does not run ({exc}). {HOW_TO_GET}.") from None
    text = f"{answer.stdout}\n{answer.stderr}"
    if "error while loading shared libraries" in text:
        line = next(line for line in text.splitlines() if "error while loading shared libraries" in line)
        raise PerfAnalyzerMissing(f"{path} cannot start: {line.split(': ', 1)[-1].strip()}. {_library_fix(line)}")
    version = next(
        (line.rsplit("Version", 1)[-1].split()[0] for line in text.splitlines() if "Perf Analyzer Version" in line), ""
    )
    if not version:
        raise PerfAnalyzerMissing(
            f"{path} did not say it is perf_analyzer (`--version` printed {text.strip()[:200]!r}). {HOW_TO_GET}."
        )
    return PerfAnalyzer(analyzer.path, version, analyzer.env)


def _library_fix(line: str) -> str:
    if "libb64" in line:
        return "Install Debian's libb64-0d (`apt-get install libb64-0d`) and run again."
    if "libcudart" in line:
        return (
            f"Install PyPI's nvidia-cuda-runtime-cu12=={CUDA_RUNTIME} beside perf_analyzer (`pip install "
            f"--target <perf_analyzer's folder> --no-deps nvidia-cuda-runtime-cu12=={CUDA_RUNTIME}`), or put "
            "the folder holding libcudart.so.12 on LD_LIBRARY_PATH, and run again."
        )
    return f"Install the library it names and run again. {HOW_TO_GET}."


def _environment(path: Path, env: Mapping[str, str]) -> dict[str, str]:
    """A small environment of its own (no credentials of the run's): PATH, the locale, and
    LD_LIBRARY_PATH with the cuda_runtime folder of its prefix."""
    prefix = path.resolve().parent.parent
    candidates = [
        prefix / "nvidia" / "cuda_runtime" / "lib",
        *sorted(prefix.glob("lib/python3*/site-packages/nvidia/cuda_runtime/lib")),
        *sorted(prefix.glob("local/lib/python3*/dist-packages/nvidia/cuda_runtime/lib")),
    ]
    folders = [str(c) for c in candidates if (c / "libcudart.so.12").exists()]
    folders += [part for part in env.get("LD_LIBRARY_PATH", "").split(":") if part]
    found = {"PATH": env.get("PATH", os.defpath), "LANG": "C.UTF-8", "HOME": env.get("HOME", "/tmp")}
    if folders:
        found["LD_LIBRARY_PATH"] = ":".join(dict.fromkeys(folders))
    return found


# -- the input data -------------------------------------------------------------------------------


def input_data(load: Workload) -> dict:
    """The workload as perf_analyzer's --input-data JSON: one entry per sample, each input with its
    content (flat, row-major; floats written as floats, which it requires) and shape."""
    entries = []
    for sample in load.samples:
        entry = {}
        for name, datatype, shape, data in sample.tensors:
            content: list[object]
            if datatype in FLOATS:
                content = [float(v) for v in data]
            elif datatype == "BOOL":
                content = [bool(v) for v in data]
            elif datatype == "BYTES":
                content = [str(v) for v in data]
            else:
                content = [int(v) for v in data]
            entry[name] = {"content": content, "shape": list(shape)}
        entries.append(entry)
    return {"data": entries}


def parameter_args(load: Workload) -> list[str]:
    """--request-parameter NAME:VALUE:TYPE for each request parameter the workload's cases send."""
    args = []
    for name, value in load.parameters:
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
        args += ["--request-parameter", f"{name}:{str(value).lower() if kind == 'bool' else value}:{kind}"]
    return args


def shape_args(load: Workload) -> list[str]:
    """--shape NAME:DIMS of the first sample's inputs (for inputs with variable dimensions)."""
    first = load.samples[0]
    return [
        arg
        for name, _, shape, _ in first.tensors
        if shape
        for arg in ("--shape", f"{name}:{','.join(str(d) for d in shape)}")
    ]


# -- one measurement ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """perf_analyzer's figures at one concurrency: client-side latency percentiles (µs), infer/s."""

    concurrency: int
    throughput: float
    p50_us: float
    p90_us: float
    p99_us: float


# What perf_analyzer saw of the model when it gave no figures ("": nothing of it: its own failure).
HUNG, CRASHED, ERRORED = "hung", "crashed", "errored"
STARTUP_S = 10  # perf_analyzer's start, its connection and its first request, before the windows
HANG_WINDOWS = 4  # a run taking this many times its windows (and its requests) is hung
SERVER_ERROR = "had error:"  # perf_analyzer's "Thread [0] had error: ...": the server answered with an error
CRASH_SIGNS = ("is not healthy", "stub process")  # the Python backend's words for a stub that died


class MeasurementFailed(Exception):
    """perf_analyzer ran and gave no figures; the message is its own error. `under_load`: what the
    model did under its load (HUNG, CRASHED or ERRORED), or "" when perf_analyzer failed on its own
    (nothing the model did: its input data or its options)."""

    def __init__(self, message: str, under_load: str = "") -> None:
        super().__init__(message)
        self.under_load = under_load


def under_load(text: str) -> str:
    """CRASHED or ERRORED when perf_analyzer's output says the server answered a request with an
    error (a stub that died: "Stub process ... is not healthy"); "" when it failed on its own."""
    lines = [line for line in text.splitlines() if SERVER_ERROR in line]
    if not lines:
        return ""
    return CRASHED if any(sign in line.lower() for line in lines for sign in CRASH_SIGNS) else ERRORED


def run_timeout(levels: int, interval_ms: int, request_s: float) -> float:
    """How long a round may take before the model counts as hung: STARTUP_S, then per concurrency
    level HANG_WINDOWS times its three windows and three times the model's slowest golden request
    (at least 1 s). 16.6 s at one level of 300 ms windows for a fast model, where perf_analyzer
    itself would wait for the hung request for ever."""
    return STARTUP_S + levels * (HANG_WINDOWS * 3 * interval_ms / 1000 + 3 * max(1.0, request_s))


def parse_csv(text: str) -> list[Level]:
    """The rows of perf_analyzer's -f file: one per concurrency level."""
    levels = []
    for row in csv.DictReader(io.StringIO(text)):
        try:
            levels.append(
                Level(
                    int(row["Concurrency"]),
                    float(row["Inferences/Second"]),
                    float(row["p50 latency"]),
                    float(row["p90 latency"]),
                    float(row["p99 latency"]),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return sorted(levels, key=lambda level: level.concurrency)


def measure(
    analyzer: PerfAnalyzer,
    model: str,
    version: int,
    grpc_url: str,
    data_file: Path,
    load: Workload,
    concurrency: tuple[int, ...],
    interval_ms: int,
    out: Path,
    request_s: float = 1.0,
) -> list[Level]:
    """One round: perf_analyzer over gRPC at each concurrency, 3 windows of `interval_ms` each
    (stability accepted at once: the rounds, not the windows, carry the statistics). `request_s`:
    the model's slowest golden request, in seconds. MeasurementFailed says what the model did when
    it gave no figures: a run beyond `run_timeout` is HUNG, an error the server answered with is
    CRASHED or ERRORED."""
    low, high = min(concurrency), max(concurrency)
    step = max(1, high - low)
    args = [
        "-m",
        model,
        "-x",
        str(version),
        "-u",
        grpc_url,
        "-i",
        "grpc",
        "--concurrency-range",
        f"{low}:{high}:{step}" if high > low else str(low),
        "--measurement-interval",
        str(interval_ms),
        "--stability-percentage",
        "1000",
        "--max-trials",
        "3",
        "--input-data",
        str(data_file),
        *shape_args(load),
        *parameter_args(load),
        "-f",
        str(out),
    ]
    if load.batch_size is not None:
        args += ["-b", str(load.batch_size)]
    out.unlink(missing_ok=True)
    timeout = run_timeout(len(concurrency), interval_ms, request_s)
    try:
        answer = analyzer.run(args, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MeasurementFailed(
            f"no answer: perf_analyzer's round of {3 * interval_ms} ms windows did not finish within {timeout:.1f} s",
            HUNG,
        ) from None
    levels = parse_csv(out.read_text(encoding="utf-8", errors="replace")) if out.exists() else []
    if answer.returncode != 0 or not levels:
        text = f"{answer.stdout}\n{answer.stderr}"
        raise MeasurementFailed(_error_line(text) or f"exit {answer.returncode}", under_load(text))
    return levels


def write_input_data(load: Workload, path: Path) -> Path:
    path.write_text(json.dumps(input_data(load)), encoding="utf-8")
    return path


def _error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:  # the server's answer first: it says what the model did
        if SERVER_ERROR in line:
            return line.split(SERVER_ERROR, 1)[1].strip()[:300]
    for line in lines:
        if line.lower().startswith(("error", "failed", "thread [")) or "error:" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else ""
