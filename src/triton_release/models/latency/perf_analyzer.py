"""NVIDIA's perf_analyzer, as the latency gate runs it: finding it (or installing it on first use),
its libraries, the `--input-data` JSON made from a workload (models/workload.py), one measurement
and its CSV.

perf_analyzer ships as `bin/perf_analyzer` in the tritonclient 2.51.0 wheel (later wheels no longer
carry it). It needs libb64.so.0d (Debian's libb64-0d) and libcudart.so.12 (PyPI's
nvidia-cuda-runtime-cu12), found through LD_LIBRARY_PATH; no GPU. The action's image installs them
into their own prefix, /opt/perf_analyzer (`pip install --target`), apart from the tool's own
locked tritonclient.

Found, in this order: the `perf_analyzer` setting (a file), `perf_analyzer` on PATH, the action
image's prefix, the cache's prefix (`install`). When none has it and the latency gate is asked for
(a bound), it is installed there on first use: the two wheels of perf_analyzer.lock (pinned and
hashed, through pip and its index settings) and Debian's libb64-0d package (pinned by sha256), three
files in all, each checked against its sha256. The cache may come from anywhere, so its prefix is
checked again, once a run, before it is used: exactly those three files, or it is made again.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from triton_release import progress
from triton_release.cache import cache_dir, checked, discard, exclusive, mark_checked
from triton_release.files import atomic_folder
from triton_release.models.tensors import FLOATS
from triton_release.models.workload import Workload

NAME = "perf_analyzer"
IMAGE_PREFIX = Path("/opt/perf_analyzer")  # the action image's (Dockerfile)
TRITONCLIENT = "2.51.0"
CUDA_RUNTIME = "12.6.77"
LOCK = Path(__file__).with_name("perf_analyzer.lock")  # its two wheels, pinned and hashed
LIBB64_DEB = "https://deb.debian.org/debian/pool/main/libb/libb64/libb64-0d_1.2-5+b1_amd64.deb"
LIBB64_DEB_SHA256 = "b0e1d6fde8bdccc18c3884144aede064dc82464dd4777275fa80e74c05583e82"
# What an installed prefix holds, exactly: its path there -> (the member of the wheel or the .deb
# it comes from, its sha256).
FILES = {
    "bin/perf_analyzer": (
        f"tritonclient-{TRITONCLIENT}.data/data/bin/perf_analyzer",
        "a8e3fa6d2fcd535770f18fa3c9baf21aee85697352637d24c6b2818401c95a34",
    ),
    "lib/libcudart.so.12": (
        "nvidia/cuda_runtime/lib/libcudart.so.12",
        "095296727cfb5f51e5b3ae69a3cb88cbd7b6592f314ace0fdfc4e1d758c2aa85",
    ),
    "lib/libb64.so.0d": (
        "./usr/lib/x86_64-linux-gnu/libb64.so.0d",
        "9d910643a635b0b534228f1437af9787d8386cf7b955639019ce6f65422b8f37",
    ),
}
HOW_TO_GET = (
    "The latency gate installs it on first use (--max-latency-increase) into the cache folder; by "
    f"hand: `pip install --target ~/perf_analyzer --no-deps tritonclient=={TRITONCLIENT} "
    f"nvidia-cuda-runtime-cu12=={CUDA_RUNTIME}` and `apt-get install libb64-0d`, then give "
    "--perf-analyzer ~/perf_analyzer/bin/perf_analyzer (perf_analyzer: in triton-release.yaml) or put "
    "that bin/ on PATH. The action's image has it"
)
log = logging.getLogger("triton_release")


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


def find(given: str | None, env: Mapping[str, str], install_missing: bool = False) -> PerfAnalyzer:
    """perf_analyzer as the setting names it, else on PATH, else in the action image's prefix, else
    in the cache's (installed there first when `install_missing`), checked to run (`--version`) with
    its libraries. PerfAnalyzerMissing says why not, and how to get it."""
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise PerfAnalyzerMissing(f"perf_analyzer {given} (the perf_analyzer setting) is not a file. {HOW_TO_GET}.")
    else:
        found = shutil.which(NAME, path=env.get("PATH", os.defpath))
        path = Path(found) if found else IMAGE_PREFIX / "bin" / NAME
        if not path.is_file():
            prefix = installed_prefix()
            if not install_missing and not (prefix / ".complete").exists():
                raise PerfAnalyzerMissing(
                    f"perf_analyzer was not found: not on PATH, not in {IMAGE_PREFIX}, not installed in "
                    f"{prefix}, and no perf_analyzer setting. {HOW_TO_GET}."
                )
            path = install(prefix)
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


# -- installing it on first use -------------------------------------------------------------------


def installed_prefix() -> Path:
    """Where the latency gate installs perf_analyzer: in the cache folder, by its version."""
    return cache_dir() / "tools" / f"perf_analyzer-{TRITONCLIENT}"


def install(prefix: Path) -> Path:
    """perf_analyzer and its two libraries in `prefix` (bin/, lib/), fetched when it does not hold
    exactly FILES; its path. A prefix that holds anything else is discarded with a warning and made
    again; one this run checked is used as it is. PerfAnalyzerMissing when it cannot be fetched."""
    binary = prefix / "bin" / NAME
    if checked(prefix):
        return binary
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise PerfAnalyzerMissing(
            f"perf_analyzer {TRITONCLIENT} is installed on first use on x86-64 Linux only (this is "
            f"{sys.platform} {platform.machine()}). Run the gate where the action's image runs, or give "
            "--perf-analyzer a perf_analyzer built for this machine"
        )
    with exclusive(f"perf_analyzer in {prefix}"):
        why = differs(prefix)
        if why and (prefix.exists() or prefix.is_symlink()):
            discard(prefix, why)
        if why:
            with progress.task("perf_analyzer", unit="files", total=len(FILES)) as bar:
                bar.update(detail=f"installing {TRITONCLIENT} into {prefix} (first use, about 15 MB)")
                log.info(f"installing perf_analyzer {TRITONCLIENT} into {prefix} (first use of the latency gate)")
                with atomic_folder(prefix) as partial:
                    _fetch(partial)
                    bar.update(len(FILES))
            why = differs(prefix)
            if why:  # another writer's folder won the rename, and it is not what it claims
                raise PerfAnalyzerMissing(f"{prefix} {why} after installing perf_analyzer into it. {HOW_TO_GET}")
    mark_checked(prefix)
    return binary


def differs(prefix: Path) -> str:
    """'' when `prefix` holds exactly FILES (regular files, each of its sha256, bin/perf_analyzer
    executable) and its `.complete` marker; else what differs, the first found."""
    if prefix.is_symlink() or not prefix.is_dir():
        return "is not a folder" if prefix.exists() or prefix.is_symlink() else "is missing"
    if not (prefix / ".complete").is_file():
        return "was never finished"
    seen = set()
    for top, folders, names in os.walk(prefix):
        for name in [*folders, *names]:
            path = Path(top, name)
            relative = path.relative_to(prefix).as_posix()
            if name in folders and not path.is_symlink():
                if relative not in ("bin", "lib"):
                    return f"holds the folder {relative}, which perf_analyzer's install does not"
                continue
            if relative == ".complete":
                continue
            if relative not in FILES:
                return f"holds {relative}, which perf_analyzer's install does not"
            if path.is_symlink() or not path.is_file():
                return f"holds {relative}, which is not a regular file"
            seen.add(relative)
    missing = sorted(set(FILES) - seen)
    if missing:
        return f"lacks {missing[0]}"
    for relative, (_, sha256) in FILES.items():
        with open(prefix / relative, "rb") as handle:
            if hashlib.file_digest(handle, "sha256").hexdigest() != sha256:
                return f"holds {relative} with other bytes than perf_analyzer {TRITONCLIENT}'s"
    if not os.access(prefix / "bin" / NAME, os.X_OK):
        return f"holds bin/{NAME}, which is not executable"
    return ""


def _fetch(folder: Path) -> None:
    """FILES into `folder`: the wheels of LOCK through pip (its index settings, hashes required),
    libb64 from Debian's package; every file checked against its sha256."""
    with tempfile.TemporaryDirectory(prefix="perf_analyzer-wheels-", dir=folder.parent) as wheels:
        command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input"]
        command += ["--no-deps", "--require-hashes", "--only-binary", ":all:", "--dest", wheels, "-r", str(LOCK)]
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip() and "WARNING" not in line]
            raise PerfAnalyzerMissing(
                f"perf_analyzer {TRITONCLIENT} could not be installed on first use: `pip download` of "
                f"{LOCK.name} failed ({lines[-1].strip() if lines else f'exit {done.returncode}'}). {HOW_TO_GET}"
            )
        members = {member: relative for relative, (member, _) in FILES.items()}
        for wheel in sorted(Path(wheels).glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                for member in set(members) & set(archive.namelist()):
                    _place(folder, members[member], archive.read(member))
    _place(folder, "lib/libb64.so.0d", _libb64())


def _libb64() -> bytes:
    """libb64.so.0d out of Debian's libb64-0d package (an ar archive holding data.tar.xz)."""
    import requests

    try:
        answer = requests.get(LIBB64_DEB, timeout=60)
        answer.raise_for_status()
    except requests.RequestException as exc:
        raise PerfAnalyzerMissing(
            f"perf_analyzer's library libb64 could not be downloaded from {LIBB64_DEB} ({exc.__class__.__name__}: "
            f"{str(exc)[:200]}). {HOW_TO_GET}"
        ) from None
    deb = answer.content
    if hashlib.sha256(deb).hexdigest() != LIBB64_DEB_SHA256:
        raise PerfAnalyzerMissing(
            f"{LIBB64_DEB} is not the package it was pinned as (its sha256 differs). {HOW_TO_GET}"
        )
    member = FILES["lib/libb64.so.0d"][0]
    with tarfile.open(fileobj=io.BytesIO(_ar_member(deb, "data.tar.xz")), mode="r:xz") as data:
        extracted = data.extractfile(member)
        if extracted is None:
            raise PerfAnalyzerMissing(f"{LIBB64_DEB} holds no {member}. {HOW_TO_GET}")
        return extracted.read()


def _ar_member(archive: bytes, name: str) -> bytes:
    """One member of an ar archive (a .deb): after the magic, 60-byte headers, each followed by
    its data, padded to an even length."""
    if not archive.startswith(b"!<arch>\n"):
        raise PerfAnalyzerMissing(f"{LIBB64_DEB} is not a Debian package. {HOW_TO_GET}")
    at = 8
    while at + 60 <= len(archive):
        header = archive[at : at + 60]
        member, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        if member == name:
            return archive[at + 60 : at + 60 + size]
        at += 60 + size + size % 2
    raise PerfAnalyzerMissing(f"{LIBB64_DEB} holds no {name}. {HOW_TO_GET}")


def _place(folder: Path, relative: str, data: bytes) -> None:
    if hashlib.sha256(data).hexdigest() != FILES[relative][1]:
        raise PerfAnalyzerMissing(
            f"{relative} of perf_analyzer {TRITONCLIENT}, as downloaded, is not the file it was pinned as. {HOW_TO_GET}"
        )
    target = folder / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    target.chmod(0o755 if relative.startswith("bin/") else 0o644)


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
        prefix / "lib",  # an install's (`install`)
        prefix / "nvidia" / "cuda_runtime" / "lib",
        *sorted(prefix.glob("lib/python3*/site-packages/nvidia/cuda_runtime/lib")),
        *sorted(prefix.glob("local/lib/python3*/dist-packages/nvidia/cuda_runtime/lib")),
    ]
    folders = [str(c) for c in candidates if (c / "libcudart.so.12").exists() or (c / "libb64.so.0d").exists()]
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
TOO_SHORT = "No valid requests recorded within time interval"  # a window no request finished in
# windows too far apart even for --stability-percentage 1000: a stall of the runner in one of them
UNSTABLE = "Failed to obtain stable measurement"


class MeasurementFailed(Exception):
    """perf_analyzer ran and gave no figures; the message is its own error. `under_load`: what the
    model did under its load (HUNG, CRASHED or ERRORED), or "" when perf_analyzer failed on its own
    (nothing the model did: its input data or its options)."""

    def __init__(self, message: str, under_load: str = "", too_short: bool = False) -> None:
        super().__init__(message)
        self.under_load = under_load
        self.too_short = too_short  # a window no request finished in, or a stalled one: a longer one may do


def under_load(text: str) -> str:
    """CRASHED or ERRORED when perf_analyzer's output says the server answered a request with an
    error (a stub that died: "Stub process ... is not healthy"); "" when it failed on its own."""
    lines = [line for line in text.splitlines() if SERVER_ERROR in line]
    if not lines:
        return ""
    return CRASHED if any(sign in line.lower() for line in lines for sign in CRASH_SIGNS) else ERRORED


def run_timeout(levels: int, interval_ms: int, request_s: float, windows: int = 3) -> float:
    """How long a round may take before the model counts as hung: STARTUP_S, then per concurrency
    level HANG_WINDOWS times its windows and three times the model's slowest golden request (at
    least 1 s). 14.2 s at one level of three 100 ms windows for a fast model, where perf_analyzer
    itself would wait for the hung request for ever."""
    return STARTUP_S + levels * (HANG_WINDOWS * windows * interval_ms / 1000 + 3 * max(1.0, request_s))


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
    windows: int = 3,
) -> list[Level]:
    """One round: perf_analyzer over gRPC at each concurrency, `windows` windows of `interval_ms`
    each (stability accepted at once: the rounds, not the windows, carry the statistics). `request_s`:
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
        str(windows),
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
    timeout = run_timeout(len(concurrency), interval_ms, request_s, windows)
    try:
        answer = analyzer.run(args, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MeasurementFailed(
            f"no answer: perf_analyzer's round of {windows} x {interval_ms} ms windows did not finish within {timeout:.1f} s",
            HUNG,
        ) from None
    levels = parse_csv(out.read_text(encoding="utf-8", errors="replace")) if out.exists() else []
    if answer.returncode != 0 or not levels:
        text = f"{answer.stdout}\n{answer.stderr}"
        longer = TOO_SHORT in text or UNSTABLE in text  # a longer window may do
        raise MeasurementFailed(_error_line(text) or f"exit {answer.returncode}", under_load(text), longer)
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
