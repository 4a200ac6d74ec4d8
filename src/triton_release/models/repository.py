"""The model repository as Triton sees it: models, numbered versions, configs parsed with
Triton's own schema (tritonclient's model_config_pb2).

Also here: the model-name rule, the symbolic links the repository may hold, and a model folder's
fingerprint. A requirements.txt is read in models/requirements_file.py; the hint for a misspelled
enum value in a config: models/config/hints.py."""

from __future__ import annotations

import base64
import binascii
import contextlib
import difflib
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from triton_release.cache import Memo
from triton_release.errors import UsageError
from triton_release.models.calls import callees, version_calls
from triton_release.models.config.completion import completes_its_config
from triton_release.models.config.hints import enum_hint, field_hint
from triton_release.models.config.schema import model_config_pb2
from triton_release.models.graph import ensemble_needs
from triton_release.problems import Problem, display_path

CONFIG_FILE = "config.pbtxt"
PYTHON_MODEL_FILE = "model.py"  # the Python backend's model file unless default_model_filename says otherwise
GOLDEN_DIR = "golden"
REQUIREMENTS_FILE = "requirements.txt"
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MAX_NAME_LENGTH = 128  # <name>.v<N>.tar and <name>.files.tar stay far below a file name's 255 bytes
VERSION_DIR = re.compile(r"^[1-9][0-9]*$")


def model_name_problem(name: str) -> str | None:
    """Why `name` cannot be a model's name, or None. Names reach paths, git and docker."""
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"model name {name[:24]!r}... is {len(name)} characters long: at most {MAX_NAME_LENGTH} are "
            "allowed (the name becomes file names in the image's build); rename the folder"
        )
    if not MODEL_NAME.match(name):
        return (
            f"model name {name!r} is not allowed: use letters, digits, '_', '-' and '.', starting with "
            "a letter or digit; rename the folder"
        )
    return None


LAYOUT = (
    "A model repository holds one folder per model: <model>/config.pbtxt, <model>/1/model.py (the "
    "numbered version folders), <model>/golden/<case>.json"
)


def not_a_model_repository(root: Path, given_as: str = "--model-repository DIR") -> str | None:
    """Why the folder `root` is no model repository, with the fix, or None: it holds no model
    folder, or it is one model's folder (a config.pbtxt, a numbered version folder). `given_as`:
    where the run takes the folder (a flag, an action input)."""
    folders = [child for child in root.iterdir() if child.is_dir() and not child.name.startswith(".")]
    own = [child.name for child in folders if VERSION_DIR.match(child.name)]
    if (root / CONFIG_FILE).is_file() or own:
        held = CONFIG_FILE if (root / CONFIG_FILE).is_file() else f"the version folder {sorted(own, key=int)[0]}/"
        parent = display_path(root.resolve().parent)
        return (
            f"{display_path(root)} is one model's folder (it holds {held}), not a model repository. {LAYOUT}: "
            f"give the folder that holds the model folders, here {parent} ({given_as.replace('DIR', parent)})."
        )
    if not folders:
        return (
            f"no model found in {display_path(root)}: it holds no model folder. {LAYOUT}. Give the folder "
            f"holding your models: {given_as} (or model_repository: in triton-release.yaml)."
        )
    return None


# -- symbolic links: followed while they stay inside the model repository --------------------

MAX_LINKED_ENTRIES = 100_000  # files and folders reached through linked folders, per walk


class _Stop(Exception):
    """The walk went past MAX_LINKED_ENTRIES."""


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def outside(path: Path | str, root: Path | str) -> Path | None:
    """Where `path` really is when symbolic links (its own or a parent's) take it out of `root`;
    None when it stays inside."""
    top = os.fspath(root)
    parts = _below(os.fspath(path), top)
    if parts is not None:
        current = top
        for part in parts:  # in strings: a thousand models ask this of every folder and file
            current = os.path.join(current, part)
            if os.path.islink(current):
                break
        else:
            return None  # named below root, and no link on the way down: inside, without resolving anything
    real, base = _real(Path(path)), _real(Path(root))
    return None if real == base or base in real.parents else real


def _parts(path: str) -> list[str]:
    """`path`'s parts as pathlib reads a POSIX path: its anchor ("/", or "//" for exactly two
    leading slashes), then its names, without empty and "." ones."""
    anchor = "//" if path.startswith("//") and not path.startswith("///") else "/" if path.startswith("/") else ""
    return ([anchor] if anchor else []) + [name for name in path.split("/") if name and name != "."]


def _below(path: str, root: str) -> list[str] | None:
    """The names leading from `root` down to `path`, when `path` is written below `root` without `..`."""
    inside, top = _parts(path), _parts(root)
    if inside[: len(top)] != top or (not top and inside[:1] in (["/"], ["//"])):
        return None  # not below it, or an absolute path against the relative root "."
    names = inside[len(top) :]
    return None if ".." in names else names


def link_problem(path: Path, root: Path) -> Problem | None:
    """Why the symbolic link `path` cannot be followed, or None (a plain path, or a link that stays
    inside `root` and points to something)."""
    target = outside(path, root)
    if target is not None:
        return Problem(
            path,
            f"symbolic link points outside the model repository ({target}): what it points to "
            "would be read and shipped in the image; copy the files in instead",
        )
    if os.path.islink(path) and not os.path.exists(path):
        return Problem(path, f"symbolic link points to nothing ({os.readlink(path)}); fix or remove it")
    return None


def kind_problem(path: Path) -> Problem | None:
    """A FIFO, socket or device where a file or folder is expected: reading it would block or never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # gone, or a dangling link: link_problem says so
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return Problem(path, "neither a file nor a folder (a FIFO, socket or device); remove it")


def walk(
    folder: Path, root: Path, skip: Callable[[str], bool] = lambda _name: False
) -> tuple[list[Path], list[Problem]]:
    """Every file and folder below `folder`, sorted, as seen through the symbolic links that stay
    inside `root`: a linked folder is walked as if its files were there. Problems for links that
    leave `root`, point to nothing or lead back into a folder above them (a loop); what lies behind
    them is not read. `skip(name)` leaves out files and folders by name."""
    found: list[Path] = []
    problems: list[Problem] = []
    linked = 0

    def visit(directory: Path, chain: tuple[Path, ...], through_link: bool) -> None:
        nonlocal linked
        try:
            with os.scandir(directory) as listed:  # each entry's kind without a stat, unless a link
                entries = sorted(listed, key=lambda entry: entry.name)
        except OSError as exc:
            problems.append(Problem(directory, f"the folder cannot be read ({exc.strerror})"))
            return
        for entry in entries:
            name = entry.name
            if skip(name):
                continue
            path = directory / name
            is_link = entry.is_symlink()
            if is_link:
                problem = link_problem(path, root)
                if problem:
                    problems.append(problem)
                    continue
            if through_link or is_link:
                linked += 1
                if linked > MAX_LINKED_ENTRIES:
                    problems.append(
                        Problem(
                            path,
                            f"symbolic links below {folder} lead to more than "
                            f"{MAX_LINKED_ENTRIES} files and folders; link fewer, or copy them in",
                        )
                    )
                    raise _Stop
            plain = not is_link and (entry.is_file(follow_symlinks=False) or entry.is_dir(follow_symlinks=False))
            problem = None if plain else kind_problem(path)
            if problem:
                problems.append(problem)
                continue
            found.append(path)
            if entry.is_dir(follow_symlinks=False) if not is_link else os.path.isdir(path):
                if is_link:  # where the folders above really are, only when a link may loop back
                    real = Path(os.path.realpath(path))
                    if any(real == seen or real in seen.parents for seen in map(_real, chain)):
                        found.pop()
                        problems.append(
                            Problem(
                                path, f"symbolic link leads back into a folder above it ({real}), a loop; remove it"
                            )
                        )
                        continue
                visit(path, (*chain, path), through_link or is_link)

    with contextlib.suppress(_Stop):
        visit(folder, (folder,), False)
    return sorted(found), problems


def datatype_name(data_type: int) -> str:
    """Config enum (TYPE_FP32, TYPE_STRING) -> KServe v2 name (FP32, BYTES)."""
    name = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


@dataclass(frozen=True)
class Model:
    name: str
    path: Path
    config: model_config_pb2.ModelConfig | None = None  # None: no config.pbtxt (auto-complete)
    config_text: str = ""
    versions: tuple[int, ...] = ()  # valid numbered version folders, ascending
    other_dirs: tuple[str, ...] = ()  # non-numeric folders (golden/ among them)
    problems: tuple[Problem, ...] = field(default=(), compare=False)

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def is_ensemble(self) -> bool:
        return self.config is not None and self.config.platform == "ensemble"

    @property
    def is_python(self) -> bool:
        """Served by the Python backend: no config.pbtxt, `backend: "python"`, or a config naming
        neither backend nor platform beside a version folder holding the model file, from which
        Triton takes the backend (model.py: python)."""
        config = self.config
        if config is None or config.backend == "python":
            return True
        if config.backend or config.platform or self.newest_version is None:
            return False
        filename = config.default_model_filename or PYTHON_MODEL_FILE
        return (self.path / str(self.newest_version) / filename).is_file()

    @property
    def completes_config(self) -> bool:
        """A Python model whose config Triton completes through its auto_complete_config (or may:
        models/config/completion.py): none at all, or a partial one such as the two lines that
        declare the models it calls."""
        if self.auto_complete:
            return True
        if not self.is_python or self.newest_version is None:
            return False
        filename = (self.config.default_model_filename if self.config else "") or PYTHON_MODEL_FILE
        try:
            source = (self.path / str(self.newest_version) / filename).read_bytes()
        except OSError:
            return False
        return completes_its_config(source)

    @property
    def declares_tensors(self) -> bool:
        """Its config.pbtxt declares inputs or outputs (a partial config of a completing model may not)."""
        return self.config is not None and bool(self.config.input or self.config.output)

    @property
    def auto_complete(self) -> bool:
        """No config.pbtxt at all (not one that fails to parse): the model must complete its own."""
        return self.config is None and not os.path.lexists(self.config_path)

    @property
    def decoupled(self) -> bool:
        return self.config is not None and self.config.model_transaction_policy.decoupled

    @property
    def newest_version(self) -> int | None:
        return self.versions[-1] if self.versions else None

    @property
    def golden_cases(self) -> list[Path]:
        return sorted((self.path / GOLDEN_DIR).glob("*.json"))

    def tensors(self, kind: str) -> dict:
        """Declared inputs or outputs by name (kind: 'input' or 'output'); {} without a config."""
        if self.config is None:
            return {}
        return {t.name: t for t in getattr(self.config, kind)}


def parse_config_text(text: str) -> model_config_pb2.ModelConfig | None:
    """A config.pbtxt's model config, or None when it does not parse (validate reports why)."""
    config, problems = parse_config(Path(CONFIG_FILE), text)
    return None if problems else config


PARSED = Memo("config-pbtxt", "1")  # text -> the config, serialized: parsed once per content


def _parsed(answer: object) -> model_config_pb2.ModelConfig:
    """A config the memo kept (serialized, base64); ValueError for one of another shape."""
    from google.protobuf.message import DecodeError

    if not isinstance(answer, str):
        raise ValueError("not a serialized config")
    config = model_config_pb2.ModelConfig()
    try:
        config.ParseFromString(base64.b64decode(answer, validate=True))
    except (DecodeError, binascii.Error) as exc:
        raise ValueError(str(exc)) from None
    return config


def parse_config(path: Path, text: str) -> tuple[model_config_pb2.ModelConfig | None, list[Problem]]:
    """The config, or None with every problem found: after an unknown enum value or an unknown field
    of one line, the parse goes on past it (each is a problem of its own, all reported in one run);
    any other syntax error ends it."""
    known = PARSED.get(text, _parsed)
    if known is not None:
        return known, []
    problems: list[Problem] = []
    for _ in range(MAX_CONFIG_PROBLEMS):
        try:
            config = text_format.Parse(text, model_config_pb2.ModelConfig())
        except text_format.ParseError as exc:
            line, col = exc.GetLine(), exc.GetColumn()
            message = str(exc)
            match = re.match(r"^\d+:\d+ : (?:'.*?': )?(.*)$", message, re.S)
            if match:
                message = match.group(1)
            hint = enum_hint(message) or field_hint(message)
            message = message.rstrip(".") if hint else message
            problems.append(Problem(path, f"{message}{hint} (Triton's model config schema)", line, col))
            patched = _past_error(text, message, line, col)
            if patched is None:
                break
            text = patched
            continue
        if problems:
            break
        PARSED.put(text, base64.b64encode(config.SerializeToString()).decode())
        return config, []
    return None, problems


MAX_CONFIG_PROBLEMS = 20
_UNKNOWN_ENUM = re.compile(r'^Enum type "([\w.]+)" has no value named (\w+)')
_UNKNOWN_FIELD = re.compile(r'^Message type "[\w.]+" has no field named "(\w+)"')
_SCALAR_REST = re.compile(r'^\s*:\s*(?:"[^"]*"|[\w.+-]+)\s*(?:#.*)?$')


def _past_error(text: str, message: str, line: int, col: int) -> str | None:
    """`text` with the error at line:col taken out so the parse can go on (an unknown enum value
    replaced by a known one; an unknown `field: scalar` blanked to the end of its line, the lines
    and columns of the rest kept); None for any other error."""
    lines = text.split("\n")
    if not (1 <= line <= len(lines) and col >= 1):
        return None
    row, at = lines[line - 1], col - 1
    enum, field = _UNKNOWN_ENUM.match(message), _UNKNOWN_FIELD.match(message)
    if enum and row.startswith(enum.group(2), at):
        try:
            values = model_config_pb2.DESCRIPTOR.pool.FindEnumTypeByName(enum.group(1)).values
        except KeyError:
            return None
        row = row[:at] + values[0].name + row[at + len(enum.group(2)) :]
    elif field and row.startswith(field.group(1), at) and _SCALAR_REST.match(row[at + len(field.group(1)) :]):
        row = row[:at] + " " * (len(row) - at)
    else:
        return None
    lines[line - 1] = row
    return "\n".join(lines)


def load_model(path: Path, root: Path | None = None) -> Model:
    """The model in folder `path` of the model repository `root` (default: the folder's parent).
    Nothing behind a symbolic link leaving `root` is read: validate reports the link, and the
    layer writer refuses it."""
    name = path.name
    root = path.parent if root is None else root
    problems: list[Problem] = []
    config, text = None, ""
    config_path = path / CONFIG_FILE
    if outside(path, root) is not None:
        return Model(name, path)
    if config_path.is_file() and outside(config_path, root) is None:
        text = config_path.read_text(encoding="utf-8", errors="replace")
        config, problems = parse_config(config_path, text)
    versions, others = [], []
    with os.scandir(path) as listed:  # a folder's kind without a stat, unless a link
        folders = sorted(entry.name for entry in listed if _is_folder(entry))
    for child in folders:
        if VERSION_DIR.match(child):
            versions.append(int(child))
        else:
            others.append(child)
    return Model(name, path, config, text, tuple(sorted(versions)), tuple(others), tuple(problems))


def _is_folder(entry: os.DirEntry) -> bool:
    """Whether `entry` is a folder or a link to one (a link that loops or leads nowhere is not:
    validate names it)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


class _Models(Mapping[str, Model]):
    """The models of a repository by name, each read the first time it is asked for."""

    def __init__(self, root: Path, names: list[str]) -> None:
        self._root, self._names = root, names
        self._loaded: dict[str, Model] = {}
        self._known = set(names)

    def __getitem__(self, name: str) -> Model:
        if name not in self._known:
            raise KeyError(name)
        if name not in self._loaded:
            self._loaded[name] = load_model(self._root / name, self._root)
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._known

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass(frozen=True)
class Repository:
    root: Path
    models: Mapping[str, Model]
    # needs(), one for the repository: each model's read once, when first asked for
    _needs: list[_Needs] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def load(cls, root: Path, lazy: bool = False) -> Repository:
        """The models below `root`; with `lazy`, each is read when first asked for, so a caller that
        needs a few of a thousand reads a few."""
        root = Path(root)
        names = [child.name for child in sorted(root.iterdir()) if child.is_dir() and not child.name.startswith(".")]
        models = _Models(root, names)
        return cls(root, models if lazy else dict(models))

    def __iter__(self) -> Iterator[Model]:
        return iter(self.models.values())

    def __contains__(self, name: str) -> bool:
        return name in self.models

    def __getitem__(self, name: str) -> Model:
        return self.models[name]

    def require(self, names: Iterable[str], given_as: str = "--models") -> None:
        """Refuse (exit 2) names that are no model of this repository: the user's command named
        them. Each is named, with the closest model where one is close, and the models there are."""
        unknown = [name for name in dict.fromkeys(names) if name not in self]
        if not unknown:
            return
        known = sorted(self.models)
        hints = [f"did you mean {c[0]!r}?" for n in unknown for c in [difflib.get_close_matches(n, known, n=1)] if c]
        raise UsageError(
            f"{given_as} names {', '.join(repr(n) for n in unknown)}, which "
            f"{'are no models' if len(unknown) > 1 else 'is no model'} in {display_path(self.root)} "
            f"(its models: {', '.join(known) or 'none'}{'; ' + ' '.join(hints) if hints else ''}). "
            "Name model folders of the model repository, comma-separated."
        )

    def needs(self) -> Mapping[str, set[str]]:
        """model -> the models it needs loaded: an ensemble's steps, the models a Python model
        calls (BLS: named in its code, the version folder's modules it imports included, or
        declared in its config). A request whose model the code does not tell loads nothing: its
        model is re-tested on every change instead (history/changes.py), and validate warns. Each
        model's read once, when asked for (its files are a release's snapshot): serving a few of a
        thousand models reads the code of those few; iterating reads every model's."""
        if not self._needs:
            self._needs.append(_Needs(self))
        return self._needs[0]


class _Needs(Mapping[str, set[str]]):
    """`Repository.needs`: the ensembles, and the Python models that need another model."""

    def __init__(self, repo: Repository) -> None:
        self._repo = repo
        self._read: dict[str, set[str] | None] = {}  # None: the model needs nothing, and is no ensemble

    def _of(self, name: str) -> set[str] | None:
        if name not in self._read:
            model = self._repo[name]
            found = ensemble_needs({name: model.config}).get(name)
            if model.is_python:
                called = callees(model.config, version_calls(model.path, model.config, model.newest_version))
                if called - {name}:
                    found = (found or set()) | (called - {name})
            self._read[name] = found
        return self._read[name]

    def __getitem__(self, name: str) -> set[str]:
        found = self._of(name) if name in self._repo else None
        if found is None:
            raise KeyError(name)
        return set(found)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._repo.models if self._of(name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# -- a model folder's fingerprint: what it holds, cheaply --------------------------------------

SMALL_FILE = 1 << 20  # files up to this size are fingerprinted by content, larger ones by stat


def fingerprint(folder: Path) -> str | None:
    """A digest of what the model folder holds: every entry's path and kind, the content of every
    file outside the version folders (configs, golden cases, requirements), of code and of
    files up to SMALL_FILE bytes in them, and the size, inode and change times of the larger
    ones (weights, which no check reads). None when the folder is, or
    holds, a symbolic link or anything but files and folders: what it shows depends on more
    than the folder."""
    digest = hashlib.sha256(os.path.abspath(folder).encode() + b"\0")

    def visit(directory: str, relative: str) -> bool:
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError:
            return False
        for entry in entries:
            if entry.is_symlink():
                return False
            path = f"{relative}/{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                digest.update(b"d" + os.fsencode(path) + b"\0")
                if not visit(entry.path, path):
                    return False
                continue
            if not entry.is_file(follow_symlinks=False):
                return False
            info = entry.stat(follow_symlinks=False)
            digest.update(b"f" + os.fsencode(path) + b"\0" + str(info.st_size).encode() + b"\0")
            weights = VERSION_DIR.match(path.split("/")[1]) and not entry.name.endswith(".py")
            if info.st_size > SMALL_FILE and weights:
                digest.update(f"{info.st_ino} {info.st_mtime_ns} {info.st_ctime_ns}".encode())
                continue
            try:
                with open(entry.path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
            except OSError:
                return False
        return True

    if os.path.islink(folder) or not visit(os.fspath(folder), ""):
        return None
    return digest.hexdigest()
