"""Resolving: the layers (defaults < triton-release.yaml < action inputs < CLI flags) merged into one
`Settings`, each value converted, its relative path anchored and its source kept."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_release.errors import UsageError
from triton_release.settings.config_file import find_root, read_config
from triton_release.settings.options import Settings
from triton_release.settings.table import BY_KEY, DEPRECATED, SETTINGS, Setting


@dataclass(frozen=True)
class _Layer:
    source: str  # where its values came from, as messages name it
    values: Mapping[str, Any]
    lines: Mapping[str, int]  # key -> its line in the settings file
    written: Mapping[str, str]  # key -> its value as the settings file writes it (for messages)
    folder: Path | None = None  # relative paths in it are relative to this folder (None: as given)


def _same_folder(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def resolve(
    cli: Mapping[str, Any],
    config_file: str | None = None,
    action_inputs: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge the layers. `cli` holds only flags the user gave (None means not given); `defaults`,
    a door's own defaults where they differ from the table's (the action's push_commit: true), sit
    under the settings file.

    Run from a subfolder, the settings file and the default model repository are found as
    `find_root` says. Relative paths in the settings file are relative to its folder; those given
    on the command line or as action inputs stay as given (relative to where the run is)."""
    cwd = cwd or Path.cwd()
    root, found = find_root(cwd)
    layers = [
        _Layer("default", {s.key: s.default for s in SETTINGS}, {}, {}, None if _same_folder(root, cwd) else root)
    ]
    if defaults:
        layers.append(_Layer("default", defaults, {}, {}))
    path = Path(config_file) if config_file else found
    if path is not None:
        data, lines, written = read_config(path)
        layers.append(_Layer(str(path), data, lines, written, None if _same_folder(path.parent, cwd) else path.parent))
    layers.append(_Layer("action input", action_inputs or {}, {}, {}))
    layers.append(_Layer("command line", {k: v for k, v in cli.items() if v is not None}, {}, {}))
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
        # the file's own words (`keep: yes`), not what YAML made of them; elsewhere the value given
        given = (
            f"`{given_key}: {layer.written[given_key]}`" if given_key in layer.written else f"{setting.key}={value!r}"
        )
        raise UsageError(f"{where}: {given} is not valid ({exc}). {setting.help}.") from None
    if setting.notice and isinstance(value, str) and converted != value:
        warnings.append(setting.notice.format(given=value, value=converted))
    if setting.anchor and layer.folder is not None and isinstance(converted, str):
        converted = setting.anchor(converted, layer.folder)
    return converted
