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


class MeasurementFailed(Exception):
    """perf_analyzer ran and gave no figures; the message is its own error."""


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
    request_timeout: float = 60,
) -> list[Level]:
    """One round: perf_analyzer over gRPC at each concurrency, 3 windows of `interval_ms` each
    (stability accepted at once: the rounds, not the windows, carry the statistics)."""
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
    timeout = len(concurrency) * (3 * interval_ms / 1000 + request_timeout) + 30
    try:
        answer = analyzer.run(args, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MeasurementFailed(f"perf_analyzer did not finish within {timeout:.0f} s") from None
    levels = parse_csv(out.read_text(encoding="utf-8", errors="replace")) if out.exists() else []
    if answer.returncode != 0 or not levels:
        raise MeasurementFailed(_error_line(f"{answer.stdout}\n{answer.stderr}") or f"exit {answer.returncode}")
    return levels


def write_input_data(load: Workload, path: Path) -> Path:
    path.write_text(json.dumps(input_data(load)), encoding="utf-8")
    return path


def _error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.lower().startswith(("error", "failed", "thread [")) or "error:" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else ""
