"""The new layers uploaded while the image is loaded and its golden cases run, on the real stack:
the image the registry serves is the one tested (its id, its layers' diff ids), X.Y.Z appears
only after the tests passed, and a refused release leaves no tag and says what it left
unreferenced."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os

import docker
import pytest

from support.models import python_model_files
from triton_release import cache, steps
from triton_release.image import assemble
from triton_release.registry import upload as uploads
from triton_release.registry.client import Manifest

pytestmark = pytest.mark.integration


@pytest.fixture
def watched(monkeypatch, releaser):
    """The test step observed: the registry's tags when it ends, and the upload beside it, whose
    thread is waited for before the cases run (so the upload surely happened during the tests);
    and when the upload started, against the daemon's load of the image."""
    seen: dict = {"tags": [], "uploads": [], "order": []}
    start, test, load = uploads.BackgroundUpload.start, steps.test, assemble.load

    def start_and_keep(self):
        seen["uploads"].append(self)
        seen["order"].append("upload started")
        return start(self)

    def load_watched(*args, **kwargs):
        seen["order"].append("load began")
        return load(*args, **kwargs)

    def test_watched(*args, **kwargs):
        for upload in seen["uploads"]:
            upload._thread.join()
        try:
            return test(*args, **kwargs)
        finally:
            seen["tags"].append(releaser.registry.tags())

    monkeypatch.setattr(uploads.BackgroundUpload, "start", start_and_keep)
    monkeypatch.setattr(steps, "test", test_watched)
    monkeypatch.setattr(assemble, "load", load_watched)
    return seen


@pytest.fixture
def released_once(git_repo, releaser, docker_client):
    """Two models released as 1.0.0 (a first release: through the daemon, nothing to reuse)."""
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    git_repo.commit("two models")
    report = releaser()
    assert report["steps"]["push"]["pushed_by"] == "daemon"
    yield git_repo
    for version in ("1.0.0", "1.1.0"):
        with contextlib.suppress(docker.errors.ImageNotFound):  # a tag this test did not make
            docker_client.images.remove(f"{releaser.target}:{version}", force=True)


def test_a_one_model_change_goes_up_during_the_tests_and_pulls_back_as_the_tested_image(
    released_once, releaser, watched, docker_client
):
    git_repo = released_once
    model_py = git_repo.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
    git_repo.commit("a: same answer, new code")
    before = releaser.registry.tags()
    report = releaser()
    push = report["steps"]["push"]
    assert report["version"] == "1.1.0" and push["pushed_by"] == "registry", push
    during = push["uploaded_during_tests"]
    assert during["referenced"] is True and during["blobs_uploaded"] >= 1 and during["bytes_uploaded"] > 0
    assert during["blobs_reused"] >= 1  # the base's layers and b: the previous release's blobs
    assert watched["tags"] == [before]  # nothing tagged while the golden cases ran
    # the new layer went up from the moment its tar was written, beside the daemon's own copy of it
    assert watched["order"][:2] == ["upload started", "load began"]
    repo = releaser.registry
    assert push["digest"] == repo.digest("1.1.0") == report["digest"]
    manifest = repo.manifest("1.1.0")
    assert manifest is not None and manifest.media_type == uploads.SCHEMA2
    local = docker_client.images.get(f"{releaser.target}:candidate")
    assert manifest.config_digest == local.id
    config = repo.image_config("1.1.0")
    assert config["rootfs"]["diff_ids"] == local.attrs["RootFS"]["Layers"]
    new = json.loads(manifest.body)["layers"][-during["blobs_uploaded"] :]
    for layer, diff_id in zip(new, config["rootfs"]["diff_ids"][-len(new) :]):  # our gzip: the tar unpacked
        assert "sha256:" + hashlib.sha256(gzip.decompress(repo.blob(layer["digest"]))).hexdigest() == diff_id
    assert report["steps"]["tidy"]["untagged"] == [f"{releaser.target}:1.1.0"]  # in the registry, not left here
    pulled = docker_client.images.pull(releaser.target, tag="1.1.0")
    assert pulled.id == local.id


@pytest.fixture
def own_blobs_cache(tmp_path, monkeypatch):
    """TRITON_RELEASE_CACHE at a folder holding the run's cache (linked) but its blobs/, which is
    its own: what this machine uploaded, as the test writes it; the run's cache again afterwards."""
    kept = cache.configure(os.environ)
    fresh = tmp_path / "cache"
    fresh.mkdir()
    for entry in kept.iterdir() if kept.is_dir() else []:
        if entry.name != "blobs":
            (fresh / entry.name).symlink_to(entry)
    monkeypatch.setenv("TRITON_RELEASE_CACHE", str(fresh))
    cache.configure(os.environ)
    yield fresh
    monkeypatch.undo()
    cache.configure(os.environ)


def test_a_cache_naming_blobs_this_repository_lacks_leaves_the_upload_to_the_previous_releases_blobs(
    released_once, releaser, own_blobs_cache, docker_client
):
    """The release after a first one, on a machine whose cache names for each unchanged layer a
    blob uploaded to another repository (tests and projects share a machine's cache; the first
    release went up through the daemon, so this repository holds the daemon's gzip): the cache's
    blob answers 404 here. The ledger-confirmed previous manifest's blob is asked first and reused,
    and the upload, not the daemon, pushes 1.1.0, which pulls back as the tested image."""
    git_repo = released_once
    held = docker_client.images.get(f"{releaser.target}:candidate").attrs["RootFS"]["Layers"]
    for diff_id in held:  # another repository's blob: none of this repository's
        uploads.remember_descriptor(diff_id, uploads.Descriptor(uploads.GZIP_LAYER, "sha256:" + "e" * 64, 404))
    model_py = git_repo.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
    git_repo.commit("a: same answer, new code")
    report = releaser()
    push = report["steps"]["push"]
    assert report["version"] == "1.1.0" and push["pushed_by"] == "registry", push
    during = push["uploaded_during_tests"]
    assert during["not_used_because"] is None and during["blobs_reused"] >= len(set(held)) - 1, during
    local = docker_client.images.get(f"{releaser.target}:candidate")
    assert docker_client.images.pull(releaser.target, tag="1.1.0").id == local.id


def test_a_release_refused_by_a_golden_case_after_the_upload_tags_nothing_and_says_so(
    released_once, releaser, watched, capsys
):
    git_repo = released_once
    model_py = git_repo.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 2"))  # the golden case now fails
    git_repo.commit("a: a wrong answer")
    before = releaser.registry.tags()
    report = releaser(code=1)
    assert report["released"] is not True and report["steps"]["test"]["ok"] is False, report["error"]
    assert releaser.registry.tags() == before and watched["tags"] == [before]
    left = report["steps"]["upload"]
    assert left["referenced"] is False and left["blobs_uploaded"] >= 1 and left["bytes_uploaded"] > 0
    out = capsys.readouterr()
    assert "named by no manifest" in out.out + out.err
    assert all(not upload._thread.is_alive() for upload in watched["uploads"])


def test_a_rewritten_previous_manifest_never_lends_its_layer_pairing(released_once, releaser, docker_client):
    """1.0.0's manifest rewritten in the registry with two layers' blobs swapped (each still a
    blob the repository holds, its size right): the upload reused the blob it named for a diff id,
    and 1.1.0 named foreign blobs. The manifest is not the one the ledger confirmed: its pairing is
    not reused, and the push goes through the daemon, whose image pulls back as the tested one."""
    git_repo, repo = released_once, releaser.registry
    manifest = repo.manifest("1.0.0")
    body = json.loads(manifest.body)
    body["layers"][0], body["layers"][-1] = body["layers"][-1], body["layers"][0]
    repo.put_manifest("1.0.0", Manifest.of(manifest.media_type, json.dumps(body, indent=3).encode()))
    model_py = git_repo.models / "a" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
    git_repo.commit("a: same answer, new code")
    report = releaser()
    push = report["steps"]["push"]
    assert report["version"] == "1.1.0" and push["pushed_by"] == "daemon", push
    assert "it was rewritten, and its layer pairing is not reused" in push["uploaded_during_tests"]["not_used_because"]
    assert report["steps"]["tidy"]["untagged"] == [f"{releaser.target}:1.1.0"]  # pulled from the registry below
    local = docker_client.images.get(f"{releaser.target}:candidate")
    assert docker_client.images.pull(releaser.target, tag="1.1.0").id == local.id
