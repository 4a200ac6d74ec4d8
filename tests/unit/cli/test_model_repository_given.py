"""validate (and release) given a `--model-repository` that is an empty folder, or one model's
folder: refused (exit 2) with what a model repository looks like, instead of "0 models ... no
problems" or advice to write score/1/1/."""

from __future__ import annotations

from support.models import python_model_files, write_tree
from triton_release.cli import main


def test_an_empty_folder_is_no_model_repository(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["validate", "--model-repository", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert f"no model found in {tmp_path / 'empty'}" in err
    assert "<model>/config.pbtxt, <model>/1/model.py" in err and "--model-repository DIR" in err


def test_one_models_folder_is_named_as_such_with_the_folder_meant(tmp_path, capsys):
    root = write_tree(tmp_path / "model_repository", python_model_files("score"))
    assert main(["validate", "--model-repository", str(root / "score")]) == 2
    err = capsys.readouterr().err
    assert "score is one model's folder (it holds config.pbtxt), not a model repository" in err
    assert f"--model-repository {root}" in err and "score/1/1/" not in err


def test_a_model_folder_without_config_is_known_by_its_version_folder(tmp_path, capsys):
    root = write_tree(tmp_path / "model_repository", {"auto/1/model.py": "class TritonPythonModel: ...\n"})
    assert main(["validate", "--model-repository", str(root / "auto")]) == 2
    assert "(it holds the version folder 1/)" in capsys.readouterr().err
