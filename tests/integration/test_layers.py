"""Content-addressed model layers: an unchanged model version keeps its layer digest, and a
repository of any size fits the layer budget."""

from __future__ import annotations

import shutil

import pytest

from support.models import PYTHON_MODEL, python_config, python_model_files, write_tree
from support.stack import BASE_IMAGE, ROOT
from triton_release.image.build import build_image
from triton_release.models.repository import Repository

pytestmark = pytest.mark.integration


def model_layers(docker_client, build) -> dict[str, str]:
    diff_ids = docker_client.images.get(build.tag).attrs["RootFS"]["Layers"]
    ours = diff_ids[-len(build.layers) :]
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


def test_two_hundred_models_fit_the_layer_budget_and_a_rebuild_keeps_all_but_one_layer(
    docker_client, tmp_path, unique, image_tags
):
    names = [f"m{i:03d}" for i in range(200)]
    root = write_tree(
        tmp_path / "model_repository", {path: text for name in names for path, text in python_model_files(name).items()}
    )
    tag = f"triton-release-test/many:{unique}"
    image_tags.append(tag)
    first = build_image(Repository.load(root), BASE_IMAGE, tag, client=docker_client, max_layers=120)
    before = docker_client.images.get(tag).attrs["RootFS"]["Layers"]
    assert len(before) <= 120 and len(first.layers) < 400
    assert any(layer.to_json()["item_count"] > 1 for layer in first.layers)  # grouped: 400 items, fewer slots

    listed = docker_client.containers.run(tag, ["ls", "/models"], remove=True, network_disabled=True).decode()
    assert listed.split() == names
    model_py = docker_client.containers.run(
        tag, ["cat", "/models/m137/1/model.py", "/models/m000/config.pbtxt"], remove=True, network_disabled=True
    ).decode()
    assert model_py == PYTHON_MODEL + python_config("m000")

    changed = root / "m137" / "1" / "model.py"
    changed.write_text(changed.read_text() + "\n# changed\n")
    build_image(Repository.load(root), BASE_IMAGE, tag, client=docker_client, max_layers=120)
    after = docker_client.images.get(tag).attrs["RootFS"]["Layers"]
    assert len(after) == len(before) and len(set(after) - set(before)) == 1
    assert after[:-1] == [diff_id for diff_id in before if diff_id in after]  # the changed layer last: cached up to it


def test_a_layer_the_daemon_was_thought_to_hold_is_sent_again_in_a_streamed_archive(
    docker_client, tmp_path, unique, image_tags
):
    """The archive goes to the daemon as it is written; when the daemon lacks a layer it was
    thought to hold (pruned meanwhile), the load says so and every layer of ours is sent."""
    from triton_release.image.assemble import assemble, image_config
    from triton_release.image.layers import write_layer_tar

    base = docker_client.images.get(BASE_IMAGE).attrs
    weights = tmp_path / "weights.bin"
    weights.write_bytes(unique.encode() * 300_000)  # a few MiB, other bytes in every run
    tar = tmp_path / "layer.tar"
    with open(tar, "wb") as out:
        ours = "sha256:" + write_layer_tar(out, {"models/m/1/weights.bin": weights})
    diff_ids = [*base["RootFS"]["Layers"], ours]
    config = image_config(base, diff_ids, {"test": unique}, None)
    tag = f"triton-release-test/streamed:{unique}"
    image_tags.append(tag)
    image_id, sent = assemble(
        docker_client, tag, config, diff_ids, len(diff_ids) - 1, {ours: tar}.__getitem__, [diff_ids]
    )
    assert sent == 1 and image_id == docker_client.images.get(tag).id
    assert docker_client.images.get(tag).attrs["RootFS"]["Layers"] == diff_ids
