"""One resolver for every setting: defaults < triton-release.yaml < action inputs < CLI flags."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from triton_release.errors import UsageError

CONFIG_FILE = "triton-release.yaml"


def _int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{value!r} is not a whole number")
    return int(value)


def _optional_int(value: Any) -> int | None:
    return None if value in (None, "", "null") else _int(value)


def _keep(value: Any) -> int | None:
    keep = _optional_int(value)
    if keep is not None and keep < 1:
        raise ValueError("keep at least 1 release; leave it unset to keep every release")
    return keep


def _seconds(value: Any) -> int:
    seconds = _int(value)
    if seconds < 1:
        raise ValueError("give at least 1 second")
    return seconds


def _bool(value: Any) -> bool:
    text = str(value).strip().lower()
    if isinstance(value, bool) or text in ("true", "false"):
        return text == "true"
    raise ValueError(f"{value!r} is not true or false")


def _text(value: Any) -> str:
    if isinstance(value, (dict, list, bool)):
        raise ValueError(f"{value!r} is not a text value")
    return str(value)


MIN_MEMORY = 64 << 20
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def memory_bytes(value: Any) -> int:
    """A memory size (bytes, or a number with k, m, g or t) of at least 64m, in bytes."""
    size = None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (match := _SIZE.match(value)):
        number, unit = match.groups()
        size = int(float(number) * _UNITS[unit.lower()])
    if size is None or size < MIN_MEMORY:
        raise ValueError(f"{value!r} is not a memory size of at least 64m, such as 8g or 512m")
    return size


def _size(value: Any) -> int | None:
    return None if value in (None, "") else memory_bytes(value)


def _rounds(value: Any) -> int:
    rounds = _int(value)
    if not 2 <= rounds <= 100:
        raise ValueError("give 2 to 100 rounds: a confidence interval needs at least 2 pairs of rounds to resample")
    return rounds


def _warmup(value: Any) -> str:
    """off or golden; YAML reads a bare `off` as false, which means off too."""
    if value is False or value == "off":
        return "off"
    if value == "golden":
        return "golden"
    raise ValueError(f"{value!r} is not one of off, golden")


def _milliseconds(value: Any) -> int:
    milliseconds = _int(value)
    if not 50 <= milliseconds <= 60_000:
        raise ValueError("give 50 to 60000 milliseconds")
    return milliseconds


def _count(value: Any) -> int:
    count = _int(value)
    if count < 1:
        raise ValueError("give at least 1")
    return count


def _choice(*choices: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return convert


STUB_PROVIDERS = ("auto", "stock", "wheel", "source")  # and path:FILE


def _stub(value: Any) -> str:
    text = _text(value)
    if text in STUB_PROVIDERS or (text.startswith("path:") and text[len("path:") :].strip()):
        return text
    raise ValueError(f"{text!r} is not a stub provider; use one of {', '.join(STUB_PROVIDERS)}, path:FILE")


def _registry_repository(value: Any) -> str:
    from triton_release.registry.client import lower_cased  # the rule lives with the reference grammar

    return lower_cased(_text(value))


def _folder_path(value: str, folder: Path) -> str:
    """A relative path written in the settings file, as seen from where the run is."""
    return value if Path(value).is_absolute() else str(folder / value)


def _stub_path(value: str, folder: Path) -> str:
    return "path:" + _folder_path(value[len("path:") :], folder) if value.startswith("path:") else value


def _python_version(value: Any) -> str | None:
    if value in (None, ""):
        return None
    if isinstance(value, float):
        raise ValueError(f'{value!r} was read as a number; quote it, e.g. python: "3.10"')
    text = str(value)
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a Python version such as 3.11")
    return text


def _fraction(value: Any) -> float | None:
    """A relative difference: a number (0.001) or a percentage ("0.1%"); None for none."""
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number such as 0.001 or 0.1%")
    text = str(value).strip()
    scale = 100.0 if text.endswith("%") else 1.0
    try:
        fraction = float(text.removesuffix("%")) / scale
    except ValueError:
        raise ValueError(f"{value!r} is not a number such as 0.001 or 0.1%") from None
    if not 0 <= fraction < float("inf"):
        raise ValueError(f"{value!r} is not a relative difference of 0 or more, such as 0.001 or 0.1%")
    return fraction


_GPU_ID = re.compile(r"^([0-9]+|(?:GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*)$")


def gpus(value: Any) -> str | None:
    """The GPUs the server container gets, as docker's --gpus writes them: all, a count (2), or
    device ids (device=0,1; given as 0,1, device=2 or GPU-<uuid> too); None for none."""
    if value in (None, ""):
        return None
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(f"{value!r} is not all, a number of GPUs or device ids")
    text = str(value).strip()
    if text.lower() == "all":
        return "all"
    if text.isascii() and text.isdigit():
        if int(text) < 1:
            raise ValueError("give at least 1 GPU, all, or device ids such as 0,1")
        return str(int(text))
    ids = [part.strip() for part in text.removeprefix("device=").split(",")]
    if not all(_GPU_ID.match(part) for part in ids):
        raise ValueError(f"{text!r} is not all, a number of GPUs (2) or comma-separated device ids (0,1)")
    return "device=" + ",".join(ids)


@dataclass(frozen=True)
class Setting:
    key: str
    default: Any
    help: str
    convert: Callable[[Any], Any] = _text
    # a value that names a path: re-anchored to the folder it was written relative to
    anchor: Callable[[str, Path], str] | None = None
    # a value the conversion changed: the warning saying so ({given} and {value})
    notice: str | None = None


SETTINGS: tuple[Setting, ...] = (
    Setting("model_repository", "model_repository", "the folder holding the models", anchor=_folder_path),
    Setting("base_image", "nvcr.io/nvidia/tritonserver:24.10-py3", "the Triton image the release is built FROM"),
    Setting("python", None, "the Python the models run on (default: the base image's python3)", _python_version),
    Setting(
        "repository",
        None,
        "the registry repository releases are pushed to, e.g. ghcr.io/org/models "
        "(lower-cased: Docker refuses upper case)",
        _registry_repository,
        notice="registry repository {given} lower-cased to {value} (Docker refuses upper case)",
    ),
    Setting("channel", "latest", "the moving tag consumers follow"),
    Setting("keep", None, "keep only the newest N releases (default: keep all)", _keep),
    Setting("load_timeout", 300, "seconds each tested model may take to become ready", _seconds),
    Setting(
        "stub",
        "auto",
        "where the Python backend stub comes from: auto|stock|wheel|source|path:FILE",
        _stub,
        anchor=_stub_path,
    ),
    Setting(
        "requirements_options",
        "refuse",
        "refuse|allow: pip options (-r, -c, -e, --index-url, -f), paths and URLs in models' requirements.txt",
        _choice("refuse", "allow"),
    ),
    Setting(
        "server_memory",
        None,
        "memory limit of the tritonserver container, e.g. 8g (default: 3/4 of this machine's memory)",
        _size,
    ),
    Setting("server_pids", 4096, "process limit of the tritonserver container", _count),
    Setting(
        "max_loaded", 50, "at most this many models loaded at once while testing: more are tested in waves", _count
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
        _choice("test", "require"),
    ),
    Setting(
        "max_drift",
        None,
        "refuse a release whose new model version answers its golden inputs further "
        "than this from the version before (the largest relative difference of any output, e.g. 0.001: a "
        "tenth of a percent); default: drift is reported, never refused",
        _fraction,
    ),
    Setting(
        "max_latency_increase",
        None,
        "refuse a release whose new model version is slower than the version "
        "before by more than this fraction (0.2, or the same as a percentage: refused when the whole confidence "
        "interval of its p50 latency ratio, measured with perf_analyzer, lies above 1.2); default: latency is "
        "reported, never refused",
        _fraction,
    ),
    Setting(
        "latency_rounds",
        4,
        "perf_analyzer rounds per version in the latency comparison, alternating N, N+1, "
        "N+1, N, ...: more rounds give tighter intervals and take longer",
        _rounds,
    ),
    Setting(
        "latency_interval",
        300,
        "milliseconds of one perf_analyzer measurement window (a round is three; "
        "longer for a model too slow for 30 requests in one)",
        _milliseconds,
    ),
    Setting(
        "perf_analyzer",
        None,
        "the perf_analyzer binary the latency gate runs (default: perf_analyzer on "
        "PATH, else /opt/perf_analyzer/bin/perf_analyzer, the action image's)",
        anchor=_folder_path,
    ),
    Setting(
        "warmup",
        "off",
        "off|golden: golden writes model_warmup from each model's golden inputs into the "
        "image's copy of its config.pbtxt (the user's is untouched), so the server reports the model ready "
        "only once warm",
        _warmup,
    ),
    Setting(
        "push_commit",
        False,
        "with --commit, push the release commit and its vX.Y.Z tag to the checked-out "
        "branch of origin once the release is published (a refused push is a warning)",
        _bool,
    ),
    Setting(
        "max_layers",
        120,
        "the image's layer budget, the base image's layers counted (overlay2 refuses about 125)",
        _count,
    ),
    Setting(
        "signing_key",
        None,
        "a PKCS#8 PEM ECDSA P-256 private key file that signs each release's evidence "
        "(its golden results, provenance and SBOM); default: the evidence is attached unsigned",
        anchor=_folder_path,
    ),
    Setting(
        "signing",
        "key",
        "key|keyless: sign the evidence with signing_key, or keyless with sigstore and the "
        "workflow's OIDC token (GitHub Actions with id-token: write)",
        _choice("key", "keyless"),
    ),
    Setting(
        "verify_key",
        None,
        "a PEM public key (cosign.pub): rollback refuses a release whose evidence does not "
        "verify with it, and verify checks with it when --key is not given",
        anchor=_folder_path,
    ),
)
BY_KEY = {s.key: s for s in SETTINGS}
# Old names that still work, with a warning: workflows and settings files already use them.
DEPRECATED = {"image": "repository"}


@dataclass(frozen=True)
class ImageOptions:
    """What the release image is built from and how: one group of settings, built once
    (Settings.image) and passed whole to the steps that build (steps.environments, steps.build)."""

    base_image: str  # the Triton image it is built FROM
    python: str | None = None  # X.Y the models run on; None: the base image's python3
    stub: str = "auto"  # where the Python backend stub comes from (image/stub.py)
    requirements_options: str = "refuse"  # pip options in requirements.txt: refuse|allow
    max_layers: int = 120  # the layer budget, the base image's layers counted
    warmup: str = "off"  # golden: model_warmup from the golden inputs, in the image's configs

    def to_json(self) -> dict:
        return {
            "base_image": self.base_image,
            "python": self.python,
            "stub": self.stub,
            "requirements_options": self.requirements_options,
            "max_layers": self.max_layers,
            "warmup": self.warmup,
        }


@dataclass(frozen=True)
class ServerOptions:
    """How tritonserver runs the golden cases: one group of settings, built once (Settings.server)
    and passed whole to the code that starts the server (steps.test, record, verify_release)."""

    load_timeout: float = 300  # seconds for the models to load
    memory: int | None = None  # the container's memory limit in bytes; None: 3/4 of this machine's
    pids: int = 4096  # the container's process limit
    max_loaded: int = 50  # at most this many models loaded at once; more are tested in waves
    gpus: str | None = None  # the GPUs it gets; None: KIND_GPU models are tested on the CPU
    gpu_models: str = "test"  # test|require: a KIND_GPU model that cannot load on the CPU

    def to_json(self) -> dict:
        return {
            "load_timeout": self.load_timeout,
            "max_loaded": self.max_loaded,
            "gpus": self.gpus,
            "gpu_models": self.gpu_models,
        }


@dataclass(frozen=True)
class PublishOptions:
    """How a release is published: one group of settings, built once (Settings.publish) and passed
    whole to the code that moves the channel, retains releases and pushes the release commit
    (release, stage, promote, push, rollback, and their steps)."""

    channel: str = "latest"  # the moving tag consumers follow
    keep: int | None = None  # keep only the newest N releases; None: every release
    push_commit: bool = False  # with --commit: push the release commit and its tag to origin


@dataclass(frozen=True)
class Settings:
    values: Mapping[str, Any]
    sources: Mapping[str, str]  # key -> where its value came from
    warnings: tuple[str, ...] = ()

    @property
    def image(self) -> ImageOptions:
        return ImageOptions(
            self.base_image, self.python, self.stub, self.requirements_options, self.max_layers, self.warmup
        )

    @property
    def server(self) -> ServerOptions:
        return ServerOptions(
            self.load_timeout, self.server_memory, self.server_pids, self.max_loaded, self.gpus, self.gpu_models
        )

    @property
    def publish(self) -> PublishOptions:
        return PublishOptions(self.channel, self.keep, self.push_commit)

    def __getattr__(self, key: str) -> Any:
        try:
            return self.values[key]
        except KeyError:
            raise AttributeError(key) from None

    def to_json(self) -> dict:
        return dict(self.values)


def read_config_file(path: Path) -> dict[str, Any]:
    """triton-release.yaml, refusing unknown keys with a 'did you mean' hint and the line."""
    return _read_config(path)[0]


def _read_config(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """The settings file's mapping, and the line of each of its keys."""
    try:
        text = path.read_text(encoding="utf-8")
        for event in yaml.parse(text):  # anchors and aliases can expand without bound: not in settings
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                mark = event.start_mark
                assert mark is not None
                raise UsageError(
                    f"{path}:{mark.line + 1}:{mark.column + 1}: YAML anchors and aliases are not "
                    "allowed in the settings file; write each value out."
                )
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the settings file ({exc.strerror}).") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: the settings file is not UTF-8 text; save it as UTF-8.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UsageError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)}). Fix the syntax.") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1: the settings file must be a mapping of keys such as base_image: ...")
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value} if isinstance(node, yaml.MappingNode) else {}
    for key in data:
        if key not in BY_KEY and key not in DEPRECATED:
            close = difflib.get_close_matches(str(key), BY_KEY, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(
                f"{path}:{lines.get(key, 1)}: unknown setting {key!r}.{hint} Known settings: {', '.join(BY_KEY)}."
            )
    return data, lines


def _git_top(folder: Path) -> Path | None:
    """The top level of the git work tree holding `folder` (where .git is, a folder or a worktree's file)."""
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def find_root(cwd: Path) -> tuple[Path, Path | None]:
    """Where a run from `cwd` finds its settings file and its default model repository, as git finds
    its repository from a subfolder: the nearest folder from `cwd` up to the git top level that holds
    triton-release.yaml; else the nearest that holds a model_repository folder; else the git top
    level; outside git, `cwd` itself. Returns that folder and its settings file (None: none)."""
    cwd = Path(os.path.abspath(cwd))
    top = _git_top(cwd)
    folders = [cwd] if top is None else [cwd, *list(cwd.parents)[: len(cwd.relative_to(top).parts)]]
    for folder in folders:
        if (folder / CONFIG_FILE).is_file():
            return folder, folder / CONFIG_FILE
    for folder in folders:
        if (folder / BY_KEY["model_repository"].default).is_dir():
            return folder, None
    return top or cwd, None


@dataclass(frozen=True)
class _Layer:
    source: str  # where its values came from, as messages name it
    values: Mapping[str, Any]
    lines: Mapping[str, int]  # key -> its line in the settings file
    folder: Path | None = None  # relative paths in it are relative to this folder (None: as given)


def _same_folder(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def resolve(
    cli: Mapping[str, Any],
    config_file: str | None = None,
    action_inputs: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Merge the layers. `cli` holds only flags the user gave (None means not given).

    Run from a subfolder, the settings file and the default model repository are found as
    `find_root` says. Relative paths in the settings file are relative to its folder; those given
    on the command line or as action inputs stay as given (relative to where the run is)."""
    cwd = cwd or Path.cwd()
    root, found = find_root(cwd)
    layers = [_Layer("default", {s.key: s.default for s in SETTINGS}, {}, None if _same_folder(root, cwd) else root)]
    path = Path(config_file) if config_file else found
    if path is not None:
        data, lines = _read_config(path)
        layers.append(_Layer(str(path), data, lines, None if _same_folder(path.parent, cwd) else path.parent))
    layers.append(_Layer("action input", action_inputs or {}, {}))
    layers.append(_Layer("command line", {k: v for k, v in cli.items() if v is not None}, {}))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    warnings: list[str] = []
    for layer in layers:
        for given_key, value in layer.values.items():
            key = given_key
            if key in DEPRECATED and value is not None:
                new = DEPRECATED[key]
                warnings.append(f"{layer.source}: {key!r} is deprecated; call it {new!r}")
                if new in layer.values and layer.values[new] is not None:
                    continue  # the new name wins within one layer
                key = new
            if key not in BY_KEY:
                continue
            values[key] = _value(BY_KEY[key], value, layer, given_key, warnings)
            sources[key] = layer.source
    return Settings(values, sources, tuple(warnings))


def _value(setting: Setting, value: Any, layer: _Layer, given_key: str, warnings: list[str]) -> Any:
    """One layer's value of `setting`, converted, its relative path anchored, its change noted."""
    if value is None:
        return None
    try:
        converted = setting.convert(value)
    except (TypeError, ValueError) as exc:
        line = layer.lines.get(given_key)
        where = f"{layer.source}:{line}" if line else layer.source
        raise UsageError(f"{where}: {setting.key}={value!r} is not valid ({exc}). {setting.help}.") from None
    if setting.notice and isinstance(value, str) and converted != value:
        warnings.append(setting.notice.format(given=value, value=converted))
    if setting.anchor and layer.folder is not None and isinstance(converted, str):
        converted = setting.anchor(converted, layer.folder)
    return converted
