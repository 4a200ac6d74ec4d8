"""What every command shares: the context it runs in, flags that set settings, the model
repository and the registry repository it works on."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from triton_release import requests
from triton_release.console import Console
from triton_release.settings import BY_KEY, Settings

if TYPE_CHECKING:
    from triton_release.registry.client import RegistryRepository

SETTING_DEST = "setting."  # argparse dests of flags that set a setting: "setting.<key>"


@dataclass(frozen=True)
class Context:
    args: argparse.Namespace
    settings: Settings
    console: Console
    env: Mapping[str, str]

    @property
    def model_repository(self) -> Path:
        return requests.model_repository(self.settings)

    @overload
    def repository(self, how: str, required: Literal[True] = ...) -> RegistryRepository: ...

    @overload
    def repository(self, how: str, required: bool) -> RegistryRepository | None: ...

    def repository(self, how: str, required: bool = True) -> RegistryRepository | None:
        """The registry repository (--to/--repo, else the `repository` setting) with its credentials."""
        return requests.repository(self.settings, self.env, requests.CLI, how, required=required)


def setting(parser: argparse._ActionsContainer, flag: str, key: str, **kwargs: Any) -> None:
    """A flag that sets the setting `key` (and wins over triton-release.yaml)."""
    kwargs.setdefault("help", BY_KEY[key].help)
    parser.add_argument(flag, dest=SETTING_DEST + key, **kwargs)


def setting_key(action: argparse.Action) -> str | None:
    """The setting a flag sets; None for a flag that sets none."""
    return action.dest[len(SETTING_DEST) :] if action.dest.startswith(SETTING_DEST) else None


def flag_default(action: argparse.Action) -> str | None:
    """A flag's default as --help and the CLI reference give it: for a flag that sets a setting, the
    setting's (true or false for a boolean); None where there is none to show."""
    key = setting_key(action)
    if key is not None:
        value = BY_KEY[key].default
    elif action.default is argparse.SUPPRESS or action.nargs == 0:
        value = None
    else:
        value = action.default
    if isinstance(value, bool):
        return "true" if value else "false"
    return None if value is None else str(value)


def given_settings(args: argparse.Namespace) -> dict:
    """The settings the command line gave: only flags declared with `setting`."""
    return {
        dest[len(SETTING_DEST) :]: value
        for dest, value in vars(args).items()
        if dest.startswith(SETTING_DEST) and value is not None
    }


SINCE_LAST_RELEASE = (
    "the commit released last (default: the last release's vX.Y.Z git tag, else the revision of "
    "the registry's newest release, else the newest vX.Y.Z tag; all zeros: a first release)"
)


def add_refs(
    parser: argparse.ArgumentParser, base_help: str = "the commit released last (all zeros or absent: a first release)"
) -> None:
    parser.add_argument("--base", metavar="REF", help=base_help)
    parser.add_argument("--head", metavar="REF", default="HEAD", help="the commit to release (default HEAD)")


def add_image_settings(parser: argparse.ArgumentParser) -> None:
    setting(parser, "--base-image", "base_image", metavar="IMAGE")
    setting(parser, "--python", "python", metavar="X.Y")
    setting(parser, "--stub", "stub", metavar="PROVIDER")
    setting(parser, "--stub-sources", "stub_sources", metavar="FOLDER|URL")


def add_server_settings(parser: argparse.ArgumentParser, gpu_models: bool = True) -> None:
    """The flags of the server that runs the golden cases (settings.ServerOptions)."""
    setting(parser, "--load-timeout", "load_timeout", metavar="SECONDS")
    setting(parser, "--max-loaded", "max_loaded", metavar="N")
    setting(parser, "--gpus", "gpus", metavar="all|N|IDS")
    if gpu_models:
        setting(parser, "--gpu-models", "gpu_models", choices=("test", "require"))


def bound(flag: str) -> Callable[[str], str]:
    """A gate's bound as a flag's value: an empty one given explicitly (`--max-latency-increase ""`,
    an unset shell variable) would switch the gate off without a word, so it is a usage error."""

    def convert(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(
                f"{flag} was given an empty value, which would switch its gate off; give a bound such as "
                "0.2 or 20%, or leave the flag out"
            )
        return text

    return convert


def add_latency_settings(parser: argparse.ArgumentParser) -> None:
    """The latency gate's flags (models/latency/)."""
    setting(
        parser,
        "--max-latency-increase",
        "max_latency_increase",
        metavar="FRACTION",
        type=bound("--max-latency-increase"),
    )
    setting(parser, "--measure-latency", "measure_latency", action="store_const", const=True)
    setting(parser, "--latency-unmeasured", "latency_unmeasured", choices=("allow", "refuse"))
    setting(parser, "--latency-rounds", "latency_rounds", metavar="N")
    setting(parser, "--latency-interval", "latency_interval", metavar="MS")
    setting(parser, "--perf-analyzer", "perf_analyzer", metavar="FILE")


def add_registry_settings(parser: argparse.ArgumentParser) -> None:
    """The flags of how the registry is reached (registry/trust.py)."""
    setting(parser, "--registry-ca", "registry_ca", metavar="PEM|FILE")


def add_signing(parser: argparse.ArgumentParser) -> None:
    """The flags of the evidence's signing (evidence/signing.py)."""
    setting(parser, "--signing-key", "signing_key", metavar="FILE")
    setting(parser, "--signing", "signing", choices=("key", "keyless"))


def models_list(text: str | None) -> list[str]:
    return [name for name in (text or "").split(",") if name]
