"""Content-addressed model layers: an unchanged model version keeps its layer digest."""

from __future__ import annotations

import shutil

import pytest

from triton_release.image.build import build_image
from triton_release.models.repository import Repository

from support.stack import BASE_IMAGE, ROOT

pytestmark = pytest.mark.integration


def model_layers(docker_client, build) -> dict[str, str]:
    diff_ids = docker_client.images.get(build.tag).attrs["RootFS"]["Layers"]
    ours = diff_ids[-len(build.layers):]
    return {layer.name: diff_id for layer, diff_id in zip(build.layers, ours)}


def test_one_model_changed_keeps_every_other_layer(docker_client, example_image, tmp_path, unique, image_tags):
    repo = tmp_path / "model_repository"
    shutil.copytree(ROOT / "model_repository", repo, ignore=shutil.ignore_patterns("__pycache__"))
    model_py = repo / "preprocess" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\n# changed\n")
    tag = f"triton-release-test/layers:{unique}"
    image_tags.append(tag)
    changed = build_image(Repository.load(repo), BASE_IMAGE, tag, client=docker_client)
    before, after = model_layers(docker_client, example_image), model_layers(docker_client, changed)
    assert set(before) == set(after)
    differing = sorted(name for name in before if before[name] != after[name])
    assert differing == ["preprocess.v1.tar"]
