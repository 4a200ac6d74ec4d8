"""The one table of settings: each setting's key, default, help and converter (`SETTINGS`), by key
(`BY_KEY`), and the old names that still work (`DEPRECATED`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_release.settings.converters import (
    boolean,
    choice,
    count,
    folder_path,
    fraction,
    gpus,
    keep,
    milliseconds,
    names,
    pem_path,
    plain_text,
    python_version,
    registry_repository,
    rounds,
    seconds,
    size,
    sources_path,
    stub,
    stub_path,
    stub_sources,
    warmup,
)


@dataclass(frozen=True)
class Setting:
    key: str
    default: Any
    help: str
    convert: Callable[[Any], Any] = plain_text
    # a value that names a path: re-anchored to the folder it was written relative to
    anchor: Callable[[str, Path], str] | None = None
    # a value the conversion changed: the warning saying so ({given} and {value})
    notice: str | None = None


SETTINGS: tuple[Setting, ...] = (
    Setting("model_repository", "model_repository", "the folder holding the models", anchor=folder_path),
    Setting("base_image", "nvcr.io/nvidia/tritonserver:26.07-py3", "the Triton image the release is built FROM"),
    Setting("python", None, "the Python the models run on (default: the base image's python3)", python_version),
    Setting(
        "repository",
        None,
        "the registry repository releases are pushed to, read as Docker reads it: e.g. ghcr.io/org/models, "
        "or team/models for Docker Hub (lower-cased: Docker refuses upper case)",
        registry_repository,
        notice="registry repository {given} lower-cased to {value} (Docker refuses upper case)",
    ),
    Setting(
        "registry_ca",
        None,
        "the CA certificate (PEM text, or a .crt file) that signs the registry's TLS certificate, trusted "
        "beside the system store and the Docker daemon's /etc/docker/certs.d/HOST:PORT/ (default: those two "
        "alone); a container action sees neither, so give it there",
        anchor=pem_path,
    ),
    Setting("channel", "latest", "the moving tag consumers follow"),
    Setting(
        "tags",
        "all",
        "all|version: the tags a release writes beside X.Y.Z; all: it moves X.Y, X, sha-<12 hex> and the "
        "channel; version: only sha-<12 hex> is added and no tag moves, for a write-once (immutable) "
        "repository; the channel then moves only by rollback or promote, where the registry allows it",
        choice("all", "version"),
    ),
    Setting("keep", None, "keep only the newest N releases (default: keep all)", keep),
    Setting("load_timeout", 300, "seconds each tested model may take to become ready", seconds),
    Setting(
        "stub",
        "auto",
        "where the Python backend stub comes from: auto|stock|wheel|source|path:FILE",
        stub,
        anchor=stub_path,
    ),
    Setting(
        "stub_sources",
        None,
        "where a source stub's sources are cloned from: a folder or URL holding git mirrors named <name>.git "
        "of python_backend, common, core, backend, pybind11, dlpack and googletest (Boost then comes from "
        "the build image's libboost-dev); default: GitHub (and Boost from archives.boost.io)",
        stub_sources,
        anchor=sources_path,
    ),
    Setting(
        "requirements_options",
        "refuse",
        "refuse|allow: pip options (-r, -c, -e, --index-url, -f), paths and URLs in models' requirements.txt",
        choice("refuse", "allow"),
    ),
    Setting(
        "custom_backends",
        (),
        "backends besides Triton's own (python, onnxruntime, pytorch, tensorrt ...) that the base image "
        "holds in /opt/tritonserver/backends, e.g. [mybackend]: validate refuses a backend name it does not "
        "know, as a typo",
        names,
    ),
    Setting(
        "server_memory",
        None,
        "memory limit of the tritonserver container, e.g. 8g (default: 3/4 of this machine's memory)",
        size,
    ),
    Setting("server_pids", 4096, "process limit of the tritonserver container", count),
    Setting(
        "max_loaded",
        50,
        "the wave size: more models than this are tested in waves of at most this many, the next "
        "wave loading beside the current one's cases where the server's memory and pids limits leave room",
        count,
    ),
    Setting(
        "gpus",
        None,
        "the GPUs the tritonserver container gets: all, a count, or device ids such as 0,1 "
        "(default: none; KIND_GPU instance groups are then tested on the CPU)",
        gpus,
    ),
    Setting(
        "gpu_models",
        "test",
        "test|require: a KIND_GPU model that cannot load on the CPU is reported and not tested, or (require) refused",
        choice("test", "require"),
    ),
    Setting(
        "max_drift",
        None,
        "refuse a release whose new model version answers its golden inputs further "
        "than this from the version before (the largest relative difference of any output, e.g. 0.001: a "
        "tenth of a percent); default: drift is reported, never refused",
        fraction,
    ),
    Setting(
        "max_latency_increase",
        None,
        "refuse a release whose new model version is slower than the version "
        "before by more than this fraction (0.2, or the same as a percentage: refused when the whole confidence "
        "interval of its p50 latency ratio, measured with perf_analyzer, lies above 1.2); default: latency is "
        "not measured unless measure_latency asks for it",
        fraction,
    ),
    Setting(
        "measure_latency",
        False,
        "measure and report each new model version's latency against the version before with "
        "perf_analyzer even without max_latency_increase (about 12 s a model: every round is run); "
        "default false: without a bound no latency is measured, wherever perf_analyzer is installed",
        boolean,
    ),
    Setting(
        "latency_unmeasured",
        "allow",
        "allow|refuse: with max_latency_increase, a model with a version before that the latency gate leaves "
        "out (a sequence or decoupled model, no golden case to replay, version N not loaded or failing under "
        "the load) is listed as not gated, or (refuse) refuses the release",
        choice("allow", "refuse"),
    ),
    Setting(
        "latency_rounds",
        10,
        "the most perf_analyzer rounds per version in the latency comparison, alternating N, N+1, "
        "N+1, N, ...; with a bound they stop after 2 or more once the verdict is clear: more rounds "
        "decide closer calls and take longer",
        rounds,
    ),
    Setting(
        "latency_interval",
        100,
        "milliseconds of one perf_analyzer measurement window (a round is three; "
        "longer for a model too slow for 30 requests in a round)",
        milliseconds,
        pem_path,
    ),
    Setting(
        "perf_analyzer",
        None,
        "the perf_analyzer binary the latency gate runs (default: perf_analyzer on "
        "PATH, else /opt/perf_analyzer/bin/perf_analyzer, the action image's, else the one the gate "
        "installs into the cache folder on first use)",
        anchor=folder_path,
    ),
    Setting(
        "warmup",
        "off",
        "off|golden: golden writes model_warmup from each model's golden inputs into the "
        "image's copy of its config.pbtxt (the user's is untouched), so the server reports the model ready "
        "only once warm",
        warmup,
    ),
    Setting(
        "push_commit",
        False,
        "with --commit, push the release commit and its vX.Y.Z tag to the checked-out "
        "branch of origin once the release is published (a refused push is a warning)",
        boolean,
    ),
    Setting(
        "upload_during_tests",
        True,
        "send the new layers to the registry as soon as the build wrote them, while the daemon loads "
        "the image and the golden cases run (no tag names them until every case passed); false: the "
        "Docker daemon pushes after the tests, for a registry that "
        "must never hold blobs no manifest names (a quota that counts them, no garbage collection)",
        boolean,
    ),
    Setting(
        "max_layers",
        120,
        "the image's layer budget, the base image's layers counted (overlay2 refuses about 125)",
        count,
    ),
    Setting(
        "signing_key",
        None,
        "a PKCS#8 PEM ECDSA P-256 private key file that signs each release's evidence, its four "
        "statements: golden results, test results, SLSA provenance and SBOM; default: the evidence is "
        "attached unsigned",
        anchor=folder_path,
    ),
    Setting(
        "signing",
        "key",
        "key|keyless: sign the evidence with signing_key, or keyless with sigstore and the "
        "workflow's OIDC token (GitHub Actions with id-token: write)",
        choice("key", "keyless"),
    ),
    Setting(
        "verify_key",
        None,
        "a PEM public key (cosign.pub): rollback refuses a release whose evidence does not "
        "verify with it, and verify checks with it when --key is not given",
        anchor=folder_path,
    ),
)
BY_KEY = {s.key: s for s in SETTINGS}
# Old names that still work, with a warning: workflows and settings files already use them.
DEPRECATED = {"image": "repository"}
