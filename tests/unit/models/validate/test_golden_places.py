"""Golden cases where users put them but no release reads them: in a version folder's golden/
(shipped in the image), in model_repository/golden/ (read as a model called golden), in
<model>/goldens/, or beside config.pbtxt. validate says where each was found and where it belongs."""

from __future__ import annotations

import json

import pytest

from support.models import golden_case, python_model_files
from triton_release.cli import main


def validated(root, tmp_path, capsys) -> tuple[int, str]:
    code = main(["validate", "--model-repository", str(root), "--report", str(tmp_path / "report.json")])
    out = capsys.readouterr()
    return code, out.out + out.err


def without_golden(name: str) -> dict:
    return {k: v for k, v in python_model_files(name).items() if "/golden/" not in k}


@pytest.mark.parametrize(
    ("placed", "fragments"),
    [
        ("a/1/golden/basic.json", ["a/1/golden/basic.json", "inside a version folder it ships in the image"]),
        ("a/goldens/basic.json", ["a/goldens/basic.json", "from golden/ only, not goldens/"]),
        ("a/basic.json", ["a/basic.json", "not beside config.pbtxt"]),
    ],
)
def test_a_case_in_the_wrong_place_of_its_model_is_named_with_where_it_belongs(
    make_repo, tmp_path, capsys, placed, fragments
):
    root = make_repo({**without_golden("a"), placed: golden_case()})
    code, printed = validated(root, tmp_path, capsys)
    assert code == 1, printed
    for fragment in [*fragments, "Move it to", "model_repository/a/golden/basic.json", "git mv"]:
        assert fragment in printed, (fragment, printed)


def test_a_golden_folder_beside_the_models_is_named_as_such_not_as_a_model(make_repo, tmp_path, capsys):
    root = make_repo({**without_golden("a"), "golden/a/basic.json": golden_case(), "golden/other.json": "{}"})
    code, printed = validated(root, tmp_path, capsys)
    assert code == 1, printed
    assert "read as a model called 'golden'" in printed
    assert f"{root}/golden/a/basic.json -> {root}/a/golden/basic.json" in printed
    assert "no version folder" not in printed


def test_a_json_file_beside_config_that_is_no_case_is_left_alone(make_repo, tmp_path, capsys):
    root = make_repo({**python_model_files("a"), "a/labels.json": json.dumps(["cat", "dog"])})
    code, printed = validated(root, tmp_path, capsys)
    assert code == 0, printed
