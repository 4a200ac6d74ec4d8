"""One resolver for every setting: defaults < triton-release.yaml < action inputs < CLI flags.

Imports run down, and every name is re-exported here (read as `settings.<name>`):
- `resolver`: `resolve`, merging the layers into one `Settings`.
- `config_file`: triton-release.yaml: finding it (`find_root`) and reading it (`read_config_file`).
- `options`: the resolved `Settings` and its typed groups (`ImageOptions`, `ServerOptions`,
  `PublishOptions`), built once and passed whole.
- `table`: `SETTINGS`, the one table (each setting's key, default, help and converter), `BY_KEY`
  and the `DEPRECATED` names.
- `converters`: what turns a given value into a setting's value, or refuses it.
"""

from triton_release.settings.config_file import CONFIG_FILE, find_root, read_config_file
from triton_release.settings.converters import MIN_MEMORY, STUB_PROVIDERS, gpus, memory_bytes
from triton_release.settings.options import ImageOptions, PublishOptions, ServerOptions, Settings
from triton_release.settings.resolver import resolve
from triton_release.settings.table import BY_KEY, DEPRECATED, SETTINGS, Setting

__all__ = [
    "BY_KEY",
    "CONFIG_FILE",
    "DEPRECATED",
    "MIN_MEMORY",
    "SETTINGS",
    "STUB_PROVIDERS",
    "ImageOptions",
    "PublishOptions",
    "ServerOptions",
    "Setting",
    "Settings",
    "find_root",
    "gpus",
    "memory_bytes",
    "read_config_file",
    "resolve",
]
