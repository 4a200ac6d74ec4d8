from __future__ import annotations

import pytest

from triton_release.cli.main import main
from triton_release.errors import UsageError
from triton_release.settings import resolve


def test_defaults(tmp_path):
    settings = resolve({}, cwd=tmp_path)
    assert settings.base_image == "nvcr.io/nvidia/tritonserver:24.10-py3" and settings.load_timeout == 300
    assert settings.sources["channel"] == "default"


def test_layers_in_order(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("channel: stable\npython: '3.11'\nkeep: 3\n")
    settings = resolve({"channel": "canary"}, action_inputs={"python": "3.12"}, cwd=tmp_path)
    assert (settings.channel, settings.python, settings.keep) == ("canary", "3.12", 3)
    assert settings.sources["keep"].endswith("triton-release.yaml")


def test_unknown_key_suggests_the_right_one(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("channel: stable\nbase_imag: x\n")
    with pytest.raises(UsageError) as err:
        resolve({}, cwd=tmp_path)
    assert "triton-release.yaml:2: unknown setting 'base_imag'. Did you mean 'base_image'?" in str(err.value)


def test_bad_yaml_is_located(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("channel: [stable\n")
    with pytest.raises(UsageError, match=r"triton-release.yaml:2:1: not valid YAML"):
        resolve({}, cwd=tmp_path)


def test_bad_value(tmp_path):
    with pytest.raises(UsageError, match="python='three' is not valid"):
        resolve({"python": "three"}, cwd=tmp_path)


def test_settings_error_exits_2(tmp_path, capsys):
    config = tmp_path / "s.yaml"
    config.write_text("modle_repository: x\n")
    assert main(["validate", "--config", str(config)]) == 2
    assert "Did you mean 'model_repository'?" in capsys.readouterr().err


@pytest.mark.parametrize("text, fragment", [
    ("keep: yes\n", "keep=True"), ("keep: 2.9\n", "keep=2.9"), ("keep: 0\n", "keep at least 1"),
    ("channel: {a: 1}\n", "channel="), ("python: 3.10\n", 'quote it, e.g. python: "3.10"'),
    ("load_timeout: -1\n", "at least 1 second"), ("requirements_options: sometimes\n", "refuse, allow"),
])
def test_a_setting_of_the_wrong_type_is_refused_not_coerced(tmp_path, text, fragment):
    (tmp_path / "triton-release.yaml").write_text(text)
    with pytest.raises(UsageError, match="is not valid") as err:
        resolve({}, cwd=tmp_path)
    assert fragment in str(err.value)


def test_the_old_image_key_is_read_as_repository_with_a_warning(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("image: ghcr.io/org/models\n")
    settings = resolve({}, cwd=tmp_path)
    assert settings.repository == "ghcr.io/org/models" and "deprecated" in settings.warnings[0]
