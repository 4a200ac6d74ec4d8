"""A production-shaped repository of tiny models, more than a layer budget of 40 holds one to a
layer with the base's (the bench runs 1,000 under the default budget, 120): it builds within the budget, is tested in waves, releases, and a one-model change then
uploads one small layer."""

from __future__ import annotations

import pytest

from support.models import python_model_files

pytestmark = pytest.mark.integration

MODELS = 50
BUDGET = ["--max-layers", "40", "--max-loaded", "20"]


def test_50_models_over_a_40_layer_budget_release_in_waves_and_a_one_model_change_uploads_one_small_layer(
    git_repo, releaser, docker_client
):
    files = {}
    for i in range(MODELS):
        files.update(python_model_files(f"m{i:03d}"))
    git_repo.write(files)
    git_repo.commit(f"{MODELS} models")

    first = releaser(*BUDGET)
    test = first["steps"]["test"]
    assert len(test["cases"]) == MODELS and test["passed"]
    assert [len(w["loaded"]) for w in test["waves"]] == [20, 20, 10]
    assert test["peak_memory_bytes"] > 0
    image = docker_client.images.get(f"{releaser.target}:candidate")
    assert len(image.attrs["RootFS"]["Layers"]) <= 40

    model_py = git_repo.models / "m023" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
    git_repo.commit("m023: same answer, new code")
    second = releaser(*BUDGET)
    assert second["version"] == "1.1.0" and second["changed_models"] == ["m023"]
    assert [len(w["loaded"]) for w in second["steps"]["test"]["waves"]] == [1]
    before = {layer["digest"] for layer in releaser.registry.manifest("1.0.0").layers}
    added = [layer for layer in releaser.registry.manifest("1.1.0").layers if layer["digest"] not in before]
    assert len(added) == 1 and added[0]["size"] < 16 * 1024, added
