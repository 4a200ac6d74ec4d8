"""The settings file, triton-release.yaml: where a run finds it (`find_root`), and reading it,
refusing what it may not hold (unknown keys, with a "did you mean" hint; anchors and aliases)."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any

import yaml

from triton_release.errors import UsageError
from triton_release.settings.table import BY_KEY, DEPRECATED

CONFIG_FILE = "triton-release.yaml"
_BOOL = "tag:yaml.org,2002:bool"


class DuplicateKey(yaml.MarkedYAMLError):
    """A key written twice in one mapping: PyYAML keeps the last silently."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's booleans: only true and false (any case) are booleans.
    YAML 1.1 also reads yes, no, on and off as booleans, so `warmup: on` or `keep: yes` would reach
    the settings (and their messages) as True; here they stay the words written, and the settings
    that take a boolean read them as true or false themselves. A key written twice in one mapping
    is refused (PyYAML would keep the last one without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: the base constructor says so
                if first is not None:
                    raise DuplicateKey(
                        problem=f"{key!r} is set twice, on line {first.line + 1} and on line "
                        f"{key_node.start_mark.line + 1}",
                        problem_mark=key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def read_config_file(path: Path) -> dict[str, Any]:
    """triton-release.yaml, refusing unknown keys with a 'did you mean' hint and the line."""
    return read_config(path)[0]


def read_config(path: Path) -> tuple[dict[str, Any], dict[str, int], dict[str, str]]:
    """The settings file's mapping, the line of each of its keys, and each value as written (the
    file's own text of it, for messages)."""
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
        node = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader: plain data only
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the settings file ({exc.strerror}).") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: the settings file is not UTF-8 text; save it as UTF-8.") from None
    except DuplicateKey as exc:
        mark = exc.problem_mark
        assert mark is not None
        raise UsageError(
            f"{path}:{mark.line + 1}: {exc.problem}; YAML keeps only the last, so one of them would be "
            "ignored without a word. Keep one of the two lines."
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UsageError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)}). Fix the syntax.") from None
    if data is None:
        return {}, {}, {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1: the settings file must be a mapping of keys such as base_image: ...")
    pairs = node.value if isinstance(node, yaml.MappingNode) else []
    lines = {k.value: k.start_mark.line + 1 for k, _ in pairs}
    written = {k.value: _written(text, v) for k, v in pairs}
    for key in data:
        if key not in BY_KEY and key not in DEPRECATED:
            close = difflib.get_close_matches(str(key), BY_KEY, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(
                f"{path}:{lines.get(key, 1)}: unknown setting {key!r}.{hint} Known settings: {', '.join(BY_KEY)}."
            )
    return data, lines, written


def _written(text: str, node: yaml.Node) -> str:
    """A value's text as the file writes it: its first line, cut at 60 characters."""
    assert node.start_mark is not None and node.end_mark is not None
    words = text[node.start_mark.index : node.end_mark.index].strip()
    first = words.split("\n")[0].rstrip()
    return first if len(first) <= 60 and first == words else first[:60] + " ..."


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
