"""What a release leaves on the Docker daemon, on the real stack: once published, only its build
under REPO:candidate (the next build's layers) beside the base; no REPO:X.Y.Z tag and no untagged
build of its own. Others share the daemon: images are told apart by this test's commits (the
revision label), and nothing is pruned."""

from __future__ import annotations

import pytest

from support.models import python_model_files
from triton_release.contract import REVISION_LABEL

pytestmark = pytest.mark.integration


def ours_on_the_daemon(client, target: str, commits: set[str]) -> tuple[set[str], list[str]]:
    """The tags of `target` on the daemon, and the untagged images built from `commits`."""
    tags = {t for image in client.api.images() for t in image.get("RepoTags") or () if t.startswith(target + ":")}
    dangling = [
        image["Id"]
        for image in client.api.images(filters={"dangling": True})
        if (client.api.inspect_image(image["Id"])["Config"].get("Labels") or {}).get(REVISION_LABEL) in commits
    ]
    return tags, dangling


def test_a_published_release_leaves_only_its_build_tag_and_the_next_one_still_reuses_its_layers(
    git_repo, releaser, docker_client
):
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    commits = {git_repo.commit("two models")}
    first = releaser()
    assert first["version"] == "1.0.0"
    tidied = first["steps"]["tidy"]
    assert tidied["untagged"] == [f"{releaser.target}:1.0.0"] and tidied["left"] == []
    assert tidied["kept"] == f"{releaser.target}:candidate"
    assert ours_on_the_daemon(docker_client, releaser.target, commits) == ({f"{releaser.target}:candidate"}, [])
    assert releaser.registry.manifest("1.0.0") is not None  # in the registry, where it belongs

    git_repo.write({"a/1/model.py": python_model_files("a")["a/1/model.py"] + "# a new version\n"})
    commits.add(git_repo.commit("a: a new version"))
    second = releaser()
    assert second["version"] == "1.1.0"
    build = second["steps"]["build"]
    # the first build was still there to build on: only what changed was sent to the daemon
    assert build["layers_sent"] == 1 < len(build["layers"]), build["layers_sent"]  # a/2 alone
    assert build["replaced"]["removed"] == [first["steps"]["build"]["image_id"]]  # then it went
    assert second["steps"]["tidy"]["untagged"] == [f"{releaser.target}:1.1.0"]
    assert ours_on_the_daemon(docker_client, releaser.target, commits) == ({f"{releaser.target}:candidate"}, [])
    assert docker_client.images.get(f"{releaser.target}:candidate").id == build["image_id"]
