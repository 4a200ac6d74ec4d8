"""The settings' converters: each turns a value as given (YAML, an action input, a flag) into the
setting's value, or refuses it with a ValueError saying what it should be; and the anchors that
re-anchor a relative path to the folder it was written in."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_release.contract import lower_cased


def _int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{value!r} is not a whole number")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a whole number") from None


def _optional_int(value: Any) -> int | None:
    return None if value in (None, "", "null") else _int(value)


def keep(value: Any) -> int | None:
    keep = _optional_int(value)
    if keep is not None and keep < 1:
        raise ValueError("keep at least 1 release; leave it unset to keep every release")
    return keep


def seconds(value: Any) -> int:
    seconds = _int(value)
    if seconds < 1:
        raise ValueError("give at least 1 second")
    return seconds


def boolean(value: Any) -> bool:
    """true or false; also yes/no and on/off, which YAML 1.1 (and the action's other true/false
    inputs) read as booleans."""
    text = str(value).strip().lower()
    if isinstance(value, bool) or text in ("true", "false", "yes", "no", "on", "off"):
        return text in ("true", "yes", "on")
    raise ValueError(f"{value!r} is not true or false")


def plain_text(value: Any) -> str:
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


def size(value: Any) -> int | None:
    return None if value in (None, "") else memory_bytes(value)


def rounds(value: Any) -> int:
    rounds = _int(value)
    if not 2 <= rounds <= 100:
        raise ValueError("give 2 to 100 rounds: a confidence interval needs at least 2 pairs of rounds to resample")
    return rounds


_BACKEND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def names(value: Any) -> tuple[str, ...]:
    """A list of names: a YAML list, or comma-separated (an action input, a flag); () for none."""
    if value in (None, ""):
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",") if isinstance(value, str) else None
    if items is None or not all(isinstance(item, str) for item in items):
        raise ValueError(f"{value!r} is not a list of names such as [mybackend] or mybackend,other")
    found = tuple(dict.fromkeys(item.strip() for item in items if item.strip()))
    bad = [item for item in found if not _BACKEND_NAME.match(item)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a backend name (letters, digits, '_', '-' and '.')")
    return found


def warmup(value: Any) -> str:
    """off or golden (false, as YAML reads `warmup: false`, means off too)."""
    if value is False or value == "off":
        return "off"
    if value == "golden":
        return "golden"
    raise ValueError(f"{value!r} is not one of off, golden")


def milliseconds(value: Any) -> int:
    milliseconds = _int(value)
    if not 50 <= milliseconds <= 60_000:
        raise ValueError("give 50 to 60000 milliseconds")
    return milliseconds


def count(value: Any) -> int:
    count = _int(value)
    if count < 1:
        raise ValueError("give at least 1")
    return count


def choice(*choices: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return convert


STUB_PROVIDERS = ("auto", "stock", "wheel", "source")  # and path:FILE


def stub(value: Any) -> str:
    text = plain_text(value)
    if text in STUB_PROVIDERS or (text.startswith("path:") and text[len("path:") :].strip()):
        return text
    raise ValueError(f"{text!r} is not a stub provider; use one of {', '.join(STUB_PROVIDERS)}, path:FILE")


_SOURCES_URL = re.compile(r"^(https?|ssh|git|file)://\S+$|^[\w.-]+@[\w.-]+:\S*$")


def stub_sources(value: Any) -> str | None:
    """Where a source stub's sources are fetched from: a folder, or a URL (https://, ssh://,
    git://, file://, user@host:path), holding git mirrors named <name>.git; None: GitHub."""
    if value in (None, ""):
        return None
    text = plain_text(value).strip()
    if "://" in text and not _SOURCES_URL.match(text):
        raise ValueError(f"{text!r} is not a folder or an https://, ssh://, git:// or file:// URL of git mirrors")
    return text.rstrip("/") or "/"


def sources_path(value: str, folder: Path) -> str:
    """A folder of mirrors written relative to the settings file, as seen from where the run is; a URL as it is."""
    return value if _SOURCES_URL.match(value) else folder_path(value, folder)


def registry_repository(value: Any) -> str:
    return lower_cased(plain_text(value).strip())  # a YAML block scalar ends in a newline


def folder_path(value: str, folder: Path) -> str:
    """A relative path written in the settings file, as seen from where the run is."""
    return value if Path(value).is_absolute() else str(folder / value)


def pem_path(value: str, folder: Path) -> str:
    """PEM text as given; a path to one, re-anchored as `folder_path` does."""
    return value if value.lstrip().startswith("-----BEGIN") else folder_path(value, folder)


def stub_path(value: str, folder: Path) -> str:
    return "path:" + folder_path(value[len("path:") :], folder) if value.startswith("path:") else value


def python_version(value: Any) -> str | None:
    if value in (None, ""):
        return None
    if isinstance(value, float):
        raise ValueError(f'YAML reads it as the number {value!r}; quote it, e.g. python: "3.10"')
    text = str(value)
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a Python version such as 3.11")
    return text


def fraction(value: Any) -> float | None:
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
    if isinstance(value, (bool, float)):
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
