"""One table of settings (settings.SETTINGS): the CLI's flags, the action's inputs and the typed
option groups agree with it on names, defaults and descriptions, so a new setting is declared once
and the rest is checked against it."""

from __future__ import annotations

import argparse
import re

import pytest
import yaml

from support.stack import ROOT
from triton_release.action.inputs import SETTING_DEFAULTS, SETTING_INPUTS
from triton_release.cli.common import SETTING_DEST
from triton_release.cli.main import parser
from triton_release.settings import BY_KEY, DEPRECATED, SETTINGS, ServerOptions, resolve

ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))["inputs"]
# Flags named after the command's noun rather than the setting (`release --to REPO`).
FLAG_ALIASES = {"--to": "repository", "--repo": "repository", "--key": "verify_key", "--no-push-commit": "push_commit"}
# Flags whose help says more than the setting's, for that command: what it does there.
OWN_HELP = {("rollback", "--key"), ("verify", "--key"), ("release", "--no-push-commit")}
# Inputs that give a setting's file as its contents (a PEM from a secret), written to a file first.
PEM_INPUTS = {"signing-key", "verify-key"}


def setting_flags():
    top = parser()
    [sub] = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in [("", top), *sub.choices.items()]:
        for action in command._actions:
            if action.dest.startswith(SETTING_DEST):
                yield name, action.option_strings[0], action.dest[len(SETTING_DEST) :], action.help


@pytest.mark.parametrize(
    ("command", "flag", "key", "help_text"),
    list(setting_flags()),
    ids=lambda v: v if isinstance(v, str) and v.startswith("--") else "",
)
def test_every_flag_that_sets_a_setting_is_named_and_described_as_the_setting(command, flag, key, help_text):
    assert key in BY_KEY, f"{command} {flag} sets {key!r}, which SETTINGS does not declare"
    assert flag == "--" + key.replace("_", "-") or FLAG_ALIASES.get(flag) == key, f"{command} {flag} sets {key}"
    if (command, flag) not in OWN_HELP:
        assert help_text == BY_KEY[key].help, f"{command} {flag}: its help is not the setting's"


@pytest.mark.parametrize("name", [n for n in SETTING_INPUTS if n not in DEPRECATED])
def test_every_input_that_is_a_setting_is_declared_once_with_the_settings_default(name):
    key = name.replace("-", "_")
    assert key in BY_KEY, f"the action's input {name} is no setting"
    assert name in ACTION, f"action.yml does not declare the input {name}"
    declared = ACTION[name].get("default", "")
    assert declared == "", (
        f"action.yml's {name} defaults to {declared!r}: leave it empty, so triton-release.yaml and then the "
        f"setting's default ({BY_KEY[key].default!r}) decide"
    )
    description = ACTION[name]["description"]
    said = re.search(r"\(default: (\d+)\)", description) or re.search(r"^(\w+) \(default\)", description)
    if said:
        default = SETTING_DEFAULTS.get(key, BY_KEY[key].default)
        assert said.group(1) == str(default), f"action.yml says {name} defaults to {said.group(1)}"


def test_the_action_s_own_defaults_are_of_settings_it_reads_and_its_descriptions_say_them():
    """An action default that is not the setting's (push_commit: true) sits under triton-release.yaml,
    so the input's default in action.yml is empty and its description says both."""
    for key, value in SETTING_DEFAULTS.items():
        name = key.replace("_", "-")
        assert name in SETTING_INPUTS and BY_KEY[key].convert(value) == value != BY_KEY[key].default
        expected = f"(default: triton-release.yaml's {key}, else {str(value).lower()})"
        assert expected in ACTION[name]["description"], name


def test_every_setting_the_action_reads_is_an_input_and_every_such_input_a_setting():
    declared = {n for n in ACTION if n.replace("-", "_") in BY_KEY or n in DEPRECATED}
    assert declared - PEM_INPUTS == set(SETTING_INPUTS), "action.yml's setting inputs and action/inputs.py's differ"


def test_the_server_options_are_the_settings_defaults_grouped(tmp_path):
    assert resolve({}, cwd=tmp_path).server == ServerOptions()
    keys = {
        "load_timeout": "load_timeout",
        "memory": "server_memory",
        "pids": "server_pids",
        "max_loaded": "max_loaded",
        "gpus": "gpus",
        "gpu_models": "gpu_models",
    }
    for field, key in keys.items():
        assert getattr(ServerOptions(), field) == BY_KEY[key].default, field
    given = resolve({"load_timeout": 12, "server_memory": "1g", "gpus": "all"}, cwd=tmp_path).server
    assert (given.load_timeout, given.memory, given.gpus) == (12, 1 << 30, "all")
    assert all(s.key in BY_KEY for s in SETTINGS)


def test_the_gate_options_are_the_drift_and_latency_settings_grouped(tmp_path):
    from triton_release.models.gates import GateOptions

    gates = GateOptions.from_settings(resolve({"max_drift": "0.1%", "latency_rounds": 6}, cwd=tmp_path), {"PATH": "/x"})
    assert gates.max_drift == pytest.approx(0.001)
    assert gates.latency is not None and gates.latency.max_increase is None and gates.latency.rounds == 6
    assert gates.latency.env == {"PATH": "/x"}
    defaults = GateOptions.from_settings(resolve({}, cwd=tmp_path), {})
    assert defaults.max_drift is BY_KEY["max_drift"].default
    assert defaults.latency is not None and defaults.latency.rounds == BY_KEY["latency_rounds"].default


def test_the_image_options_are_the_build_settings_grouped(tmp_path):
    from triton_release.settings import ImageOptions

    found = resolve({"base_image": "b:1", "stub": "wheel", "max_layers": 90}, cwd=tmp_path).image
    assert found == ImageOptions("b:1", None, "wheel", "refuse", 90, "off")
    defaults = resolve({}, cwd=tmp_path).image
    for field in ("base_image", "python", "stub", "requirements_options", "max_layers", "warmup"):
        assert getattr(defaults, field) == BY_KEY[field].default, field


def test_the_publish_options_are_the_publishing_settings_grouped(tmp_path):
    from dataclasses import fields

    from triton_release.settings import PublishOptions

    assert resolve({}, cwd=tmp_path).publish == PublishOptions()
    for field in fields(PublishOptions):
        assert field.name in BY_KEY, f"PublishOptions.{field.name} is no setting"
        assert field.default == BY_KEY[field.name].default, field.name
    given = resolve({"channel": "stable", "keep": "3", "push_commit": "true"}, cwd=tmp_path).publish
    assert given == PublishOptions("stable", 3, True)
