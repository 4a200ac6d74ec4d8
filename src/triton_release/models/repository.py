"""The model repository as Triton sees it: models, numbered versions, configs parsed with
Triton's own schema (tritonclient's model_config_pb2)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from triton_release.models.config_schema import model_config_pb2

from triton_release.models.graph import ensemble_needs
from triton_release.problems import Problem

CONFIG_FILE = "config.pbtxt"
GOLDEN_DIR = "golden"
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
VERSION_DIR = re.compile(r"^[1-9][0-9]*$")


def model_name_problem(name: str) -> str | None:
    """Why `name` cannot be a model's name, or None. Names reach paths, git and docker."""
    if not MODEL_NAME.match(name):
        return (f"model name {name!r} is not allowed: use letters, digits, '_', '-' and '.', starting with "
                "a letter or digit; rename the folder")
    return None


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
    versions: tuple[int, ...] = ()                     # valid numbered version folders, ascending
    other_dirs: tuple[str, ...] = ()                    # non-numeric folders (golden/ among them)
    problems: tuple[Problem, ...] = field(default=(), compare=False)

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def is_ensemble(self) -> bool:
        return self.config is not None and self.config.platform == "ensemble"

    @property
    def is_python(self) -> bool:
        return self.config is None or self.config.backend == "python"

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


def parse_config(path: Path, text: str) -> tuple[model_config_pb2.ModelConfig | None, list[Problem]]:
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig()), []
    except text_format.ParseError as exc:
        line, col = exc.GetLine(), exc.GetColumn()
        message = str(exc)
        match = re.match(r"^\d+:\d+ : (?:'.*?': )?(.*)$", message, re.S)
        if match:
            message = match.group(1)
        return None, [Problem(path, f"{message} (Triton's model config schema)", line, col)]


def load_model(path: Path) -> Model:
    name = path.name
    problems: list[Problem] = []
    config, text = None, ""
    config_path = path / CONFIG_FILE
    if config_path.is_file():
        text = config_path.read_text(encoding="utf-8", errors="replace")
        config, problems = parse_config(config_path, text)
    versions, others = [], []
    for child in sorted(path.iterdir()):
        if child.is_dir():
            if VERSION_DIR.match(child.name):
                versions.append(int(child.name))
            else:
                others.append(child.name)
    return Model(name, path, config, text, tuple(sorted(versions)), tuple(others), tuple(problems))


@dataclass(frozen=True)
class Repository:
    root: Path
    models: dict[str, Model]

    @classmethod
    def load(cls, root: Path) -> "Repository":
        root = Path(root)
        models = {}
        for child in sorted(root.iterdir()):
            if child.is_dir() and not child.name.startswith("."):
                models[child.name] = load_model(child)
        return cls(root, models)

    def __iter__(self):
        return iter(self.models.values())

    def __contains__(self, name: str) -> bool:
        return name in self.models

    def __getitem__(self, name: str) -> Model:
        return self.models[name]

    def needs(self) -> dict[str, set[str]]:
        """model -> the models it needs loaded (an ensemble's steps)."""
        return ensemble_needs({m.name: m.config for m in self})
