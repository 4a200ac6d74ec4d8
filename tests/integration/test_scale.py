"""A production-shaped repository of 140 tiny models (more than the layer budget holds one to a
layer, with the base's): it builds within the budget, is tested in waves, releases, and a
one-model change then uploads one small layer. bench/ runs 1,000."""

from __future__ import annotations

import pytest

from support.models import python_model_files

pytestmark = pytest.mark.integration

MODELS = 140


def test_140_models_release_in_waves_and_a_one_model_change_uploads_one_small_layer(git_repo, releaser, docker_client):
    files = {}
    for i in range(MODELS):
        files.update(python_model_files(f"m{i:03d}"))
    git_repo.write(files)
    git_repo.commit(f"{MODELS} models")

    first = releaser("--max-loaded", "50")
    test = first["steps"]["test"]
    assert len(test["cases"]) == MODELS and test["passed"]
    assert [len(w["loaded"]) for w in test["waves"]] == [50, 50, 40]
    assert test["peak_memory_bytes"] > 0
    image = docker_client.images.get(f"{releaser.target}:candidate")
    assert len(image.attrs["RootFS"]["Layers"]) <= 120

    model_py = git_repo.models / "m123" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
    git_repo.commit("m123: same answer, new code")
    second = releaser("--max-loaded", "50")
    assert second["version"] == "1.1.0" and second["changed_models"] == ["m123"]
    assert [len(w["loaded"]) for w in second["steps"]["test"]["waves"]] == [1]
    before = {layer["digest"] for layer in releaser.registry.manifest("1.0.0").layers}
    added = [layer for layer in releaser.registry.manifest("1.1.0").layers if layer["digest"] not in before]
    assert len(added) == 1 and added[0]["size"] < 16 * 1024, added
