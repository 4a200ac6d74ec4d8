from __future__ import annotations

from pathlib import Path

import pytest

from triton_release.cli.main import main
from triton_release.errors import UsageError
from triton_release.settings import resolve


def test_defaults(tmp_path):
    settings = resolve({}, cwd=tmp_path)
    assert settings.base_image == "nvcr.io/nvidia/tritonserver:26.07-py3" and settings.load_timeout == 300
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


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("keep: yes\n", "`keep: yes` is not valid ('yes' is not a whole number)"),
        ("keep: 2.9\n", "`keep: 2.9`"),
        ("keep: 0\n", "keep at least 1"),
        ("channel: {a: 1}\n", "`channel: {a: 1}`"),
        (
            "python: 3.10\n",
            '`python: 3.10` is not valid (YAML reads it as the number 3.1; quote it, e.g. python: "3.10")',
        ),
        ("warmup: on\n", "`warmup: on` is not valid ('on' is not one of off, golden)"),
        ("gpu_models: yes\n", "`gpu_models: yes` is not valid ('yes' is not one of test, require)"),
        ("load_timeout: -1\n", "at least 1 second"),
        ("requirements_options: sometimes\n", "refuse, allow"),
    ],
)
def test_a_setting_of_the_wrong_type_is_refused_not_coerced(tmp_path, text, fragment):
    (tmp_path / "triton-release.yaml").write_text(text)
    with pytest.raises(UsageError, match="is not valid") as err:
        resolve({}, cwd=tmp_path)
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("warmup: off\n", ("warmup", "off")),
        ("push_commit: yes\n", ("push_commit", True)),
        ("push_commit: off\n", ("push_commit", False)),
        ("push_commit: True\n", ("push_commit", True)),
        ("channel: on\n", ("channel", "on")),
    ],
)
def test_yes_no_on_off_stay_words_except_where_a_setting_takes_true_or_false(tmp_path, text, value):
    """YAML 1.1 reads yes/no/on/off as booleans; the settings file keeps the words written."""
    (tmp_path / "triton-release.yaml").write_text(text)
    key, expected = value
    assert getattr(resolve({}, cwd=tmp_path), key) == expected


def test_an_error_in_another_layer_still_names_the_value_given(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("keep: 2\n")
    with pytest.raises(UsageError, match=r"^action input: warmup='on' is not valid"):
        resolve({}, action_inputs={"warmup": "on"}, cwd=tmp_path)


def test_the_old_image_key_is_read_as_repository_with_a_warning(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("image: ghcr.io/org/models\n")
    settings = resolve({}, cwd=tmp_path)
    assert settings.repository == "ghcr.io/org/models" and "deprecated" in settings.warnings[0]


# -- registry repositories as users type them ------------------------------------------------


@pytest.mark.parametrize("layer", ["cli", "file", "action"])
def test_an_upper_case_registry_repository_is_lower_cased_with_a_notice(tmp_path, layer):
    given = "ghcr.io/MyOrg/Models"
    if layer == "file":
        (tmp_path / "triton-release.yaml").write_text(f"repository: {given}\n")
    settings = resolve(
        {"repository": given} if layer == "cli" else {},
        cwd=tmp_path,
        action_inputs={"repository": given} if layer == "action" else None,
    )
    assert settings.repository == "ghcr.io/myorg/models"
    assert settings.warnings == (
        "registry repository ghcr.io/MyOrg/Models lower-cased to ghcr.io/myorg/models (Docker refuses upper case)",
    )


def test_the_old_image_key_is_lower_cased_too(tmp_path):
    settings = resolve({}, action_inputs={"image": "GHCR.io/MyOrg/Models"}, cwd=tmp_path)
    assert settings.repository == "ghcr.io/myorg/models"
    assert any("lower-cased to ghcr.io/myorg/models" in warning for warning in settings.warnings)


def test_a_lower_case_registry_repository_gets_no_notice(tmp_path):
    settings = resolve({"repository": "127.0.0.1:5000/team/models"}, cwd=tmp_path)
    assert settings.repository == "127.0.0.1:5000/team/models" and settings.warnings == ()


def test_a_registry_repository_from_a_yaml_block_scalar_loses_its_newline(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("repository: |\n  127.0.0.1:5000/team/models\n")
    settings = resolve({}, cwd=tmp_path)
    assert settings.repository == "127.0.0.1:5000/team/models"


def test_a_tag_is_never_lower_cased_it_stays_refused(tmp_path):
    from triton_release.contract import lower_cased
    from triton_release.registry.client import RegistryRepository

    assert lower_cased("ghcr.io/MyOrg/Models:V1") == "ghcr.io/MyOrg/Models:V1"
    settings = resolve({"repository": "ghcr.io/MyOrg/Models:V1"}, cwd=tmp_path)
    assert settings.repository == "ghcr.io/MyOrg/Models:V1" and settings.warnings == ()
    with pytest.raises(UsageError, match="is not a registry repository"):
        RegistryRepository.parse(settings.repository)


# -- stub providers ------------------------------------------------------------------------------


def test_an_unknown_stub_in_the_file_names_the_file_line_and_the_valid_values(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("channel: stable\n\nstub: conda\n")
    with pytest.raises(UsageError) as err:
        resolve({}, cwd=tmp_path)
    message = str(err.value)
    assert f"{tmp_path / 'triton-release.yaml'}:3: `stub: conda` is not valid" in message
    assert "auto, stock, wheel, source, path:FILE" in message


@pytest.mark.parametrize("given", ["conda", "path:", "Auto", ""])
def test_an_unknown_stub_flag_is_a_settings_error(tmp_path, given):
    with pytest.raises(UsageError, match=r"command line: stub=.* auto, stock, wheel, source, path:FILE"):
        resolve({"stub": given}, cwd=tmp_path)


@pytest.mark.parametrize("given", ["auto", "stock", "wheel", "source", "path:/opt/stub"])
def test_every_stub_provider_is_accepted(tmp_path, given):
    assert resolve({"stub": given}, cwd=tmp_path).stub == given


def test_an_unknown_stub_exits_2_naming_the_file_and_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "triton-release.yaml").write_text("stub: conda\n")
    monkeypatch.chdir(tmp_path)
    assert main(["build", "--tag", "models:candidate"], env={"HOME": str(tmp_path)}) == 2
    assert "triton-release.yaml:1: `stub: conda` is not valid" in capsys.readouterr().err


def test_other_settings_errors_in_the_file_name_their_line_too(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("channel: stable\nkeep: 0\n")
    with pytest.raises(UsageError, match=r"triton-release.yaml:2: `keep: 0` is not valid"):
        resolve({}, cwd=tmp_path)


# -- run from a subfolder, as git is ---------------------------------------------------------------


def test_from_a_subfolder_the_defaults_are_at_the_git_top_level(git_repo):
    sub = git_repo.root / "some" / "sub" / "folder"
    sub.mkdir(parents=True)
    settings = resolve({}, cwd=sub)
    assert Path(settings.model_repository) == git_repo.models
    assert settings.warnings == ()


def test_from_a_subfolder_the_settings_file_is_found_and_its_paths_are_its_own(git_repo):
    (git_repo.root / "triton-release.yaml").write_text(
        "model_repository: models\nstub: path:stubs/stub\nchannel: stable\n"
    )
    sub = git_repo.root / "some" / "sub"
    sub.mkdir(parents=True)
    settings = resolve({}, cwd=sub)
    assert settings.channel == "stable" and settings.sources["channel"] == str(git_repo.root / "triton-release.yaml")
    assert Path(settings.model_repository) == git_repo.root / "models"
    assert settings.stub == f"path:{git_repo.root / 'stubs' / 'stub'}"


def test_the_nearest_settings_file_wins_and_the_search_stops_at_the_git_top_level(tmp_path):
    (tmp_path / "triton-release.yaml").write_text("channel: outside\n")  # above the repository: never read
    from support.git import GitRepo

    repo = GitRepo(tmp_path / "work")
    (repo.root / "project").mkdir()
    (repo.root / "project" / "triton-release.yaml").write_text("channel: project\n")
    (repo.root / "project" / "deep").mkdir()
    assert resolve({}, cwd=repo.root / "project" / "deep").channel == "project"
    (repo.root / "other").mkdir()
    assert resolve({}, cwd=repo.root / "other").channel == "latest"
    (tmp_path / "no-git").mkdir()  # outside any git repository: only the folder itself
    assert resolve({}, cwd=tmp_path / "no-git").channel == "latest"


def test_relative_paths_given_on_the_command_line_stay_relative_to_where_the_run_is(git_repo):
    (git_repo.root / "triton-release.yaml").write_text("model_repository: models\n")
    sub = git_repo.root / "sub"
    sub.mkdir()
    settings = resolve({"model_repository": "here", "stub": "path:stub"}, cwd=sub)
    assert (settings.model_repository, settings.stub) == ("here", "path:stub")
    assert resolve({}, action_inputs={"model_repository": "there"}, cwd=sub).model_repository == "there"


def test_at_the_root_nothing_changes(git_repo):
    assert resolve({}, cwd=git_repo.root).model_repository == "model_repository"
    (git_repo.root / "triton-release.yaml").write_text("model_repository: models\nstub: path:stub\n")
    settings = resolve({}, cwd=git_repo.root)
    assert (settings.model_repository, settings.stub) == ("models", "path:stub")


def test_an_explicit_config_file_elsewhere_anchors_its_own_paths(tmp_path):
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "release.yaml").write_text("model_repository: ../models\n")
    settings = resolve({}, str(tmp_path / "ci" / "release.yaml"), cwd=tmp_path)
    assert Path(settings.model_repository) == tmp_path / "ci" / ".." / "models"


def test_validate_runs_from_a_subfolder(git_repo, monkeypatch, capsys):
    from support.models import python_model_files

    git_repo.write(python_model_files("a"))
    sub = git_repo.root / "docs" / "notes"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert main(["validate"], env={"HOME": str(git_repo.root)}) == 0
    assert "1 models, 1 golden cases, no problems" in capsys.readouterr().out


def test_a_key_written_twice_is_refused_naming_both_lines(tmp_path, capsys):
    (tmp_path / "triton-release.yaml").write_text("channel: stable\nkeep: 3\nchannel: canary\n")
    with pytest.raises(UsageError) as err:
        resolve({}, cwd=tmp_path)
    message = str(err.value)
    assert "triton-release.yaml:3: 'channel' is set twice, on line 1 and on line 3" in message
    assert "Keep one of the two lines" in message
    assert main(["validate", "--config", str(tmp_path / "triton-release.yaml")]) == 2
    assert "'channel' is set twice" in capsys.readouterr().err
