"""Push, tags, retention and rollback against the real registry (and one with basic auth)."""

from __future__ import annotations

import json
from datetime import UTC

import pytest
import requests

from support.models import golden_case, python_model_files, write_tree
from support.reports import read_report
from support.stack import BASE_IMAGE, REGISTRY
from triton_release.cli.main import main
from triton_release.contract import is_ledger_tag
from triton_release.errors import Refused
from triton_release.image.build import build_image
from triton_release.models.repository import Repository
from triton_release.registry.client import RegistryRepository
from triton_release.registry.credentials import Credentials
from triton_release.registry.publish import push, retain, tag_release
from triton_release.registry.rollback import rollback, rollback_model
from triton_release.server.container import TritonServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def images(docker_client, tmp_path_factory, unique):
    """Three builds of a two-model repository: the second adds version 2 of model a, the third 3."""
    root = tmp_path_factory.mktemp("publish") / "model_repository"
    write_tree(root, {**python_model_files("a"), **python_model_files("b")})
    first = f"triton-release-test/publish:{unique}-1"
    build_image(Repository.load(root), BASE_IMAGE, first, client=docker_client)
    model_py = (root / "a" / "1" / "model.py").read_text().replace("x + 1", "x + 2")
    write_tree(root, {"a/2/model.py": model_py})
    second = f"triton-release-test/publish:{unique}-2"
    build_image(Repository.load(root), BASE_IMAGE, second, client=docker_client)
    write_tree(root, {"a/3/model.py": model_py.replace("x + 2", "x + 3")})
    third = f"triton-release-test/publish:{unique}-3"
    build_image(Repository.load(root), BASE_IMAGE, third, client=docker_client)
    yield first, second, third
    for tag in (first, second, third):
        docker_client.images.remove(tag, force=True)


@pytest.fixture
def repo(unique, request):
    return RegistryRepository.parse(
        f"{REGISTRY}/triton-release-test/{request.node.name[5:40].replace('_', '-')}-{unique}"
    )


def release(docker_client, image, repo, version, revision=None, channel="latest"):
    """What `push` and `release` do: X.Y.Z, then the moving tags."""
    return push(image, repo, version, client=docker_client), tag_release(repo, version, revision, channel)


def test_push_writes_every_tag_to_one_manifest_and_uploads_only_the_new_layer(docker_client, images, repo):
    first, tagged = release(docker_client, images[0], repo, "1.0.0", "a" * 40)
    assert tagged.tags == ("1.0", "1", f"sha-{'a' * 12}", "latest")
    assert {repo.digest(t) for t in ("1.0.0", *tagged.tags)} == {first.digest}
    assert tagged.channel_before is None
    second, tagged_second = release(docker_client, images[1], repo, "1.1.0", "b" * 40)
    # a's version 2 is the only layer new to this repository (sent, or linked when an earlier run sent it)
    assert second.layers_uploaded + second.layers_mounted == 1
    assert second.layers_present == first.layers_uploaded + first.layers_mounted + first.layers_present
    assert repo.digest("latest") == repo.digest("1") == second.digest != first.digest
    assert repo.digest("1.0.0") == first.digest and tagged_second.channel_before == first.digest


def test_an_existing_version_is_never_overwritten(docker_client, images, repo, tmp_path):
    pushed, _ = release(docker_client, images[0], repo, "2.0.0")
    code = main(
        ["push", "--image", images[1], "--to", str(repo), "--version", "2.0.0", "--report", str(tmp_path / "r.json")]
    )
    assert code == 1
    assert "already exists" in read_report(tmp_path / "r.json")["error"]["message"]
    assert repo.digest("2.0.0") == repo.digest("latest") == pushed.digest


def test_rollback_moves_the_channel_by_retag_and_reports_the_digest_before(docker_client, images, repo, tmp_path):
    old, _ = release(docker_client, images[0], repo, "1.0.0")
    new, _ = release(docker_client, images[1], repo, "1.1.0")
    code = main(["rollback", "--repo", str(repo), "--to-version", "1.0.0", "--report", str(tmp_path / "r.json")])
    report = read_report(tmp_path / "r.json")
    assert code == 0
    assert repo.digest("latest") == old.digest
    assert report["steps"]["rollback"]["previous_digest"] == new.digest and report["digest"] == old.digest


def test_rollback_verify_runs_the_release_golden_cases_before_moving_the_channel(
    docker_client, repo, tmp_path, unique, image_tags
):
    root = write_tree(tmp_path / "model_repository", python_model_files("a"))
    tag = f"triton-release-test/publish:{unique}-verify"
    image_tags.append(tag)
    build_image(
        Repository.load(root), BASE_IMAGE, tag, {"triton-release.models": json.dumps({"a": [1]})}, client=docker_client
    )
    pushed, _ = release(docker_client, tag, repo, "1.0.0")
    report = tmp_path / "r.json"
    args = [
        "rollback",
        "--repo",
        str(repo),
        "--to-version",
        "1.0.0",
        "--verify",
        "--model-repository",
        str(root),
        "--report",
        str(report),
    ]
    assert main([*args, "--channel", "stable"]) == 0
    done = read_report(report)
    assert done["steps"]["verify"]["passed"] is True and done["steps"]["rollback"]["verified"] is True
    assert repo.digest("stable") == pushed.digest
    write_tree(root, {"a/golden/basic.json": golden_case(out=(9, 9, 9, 9))})  # not what 1.0.0 answers
    assert main([*args, "--channel", "canary"]) == 1
    failed = read_report(report)
    assert "fails its own golden cases; the channel was not moved" in failed["error"]["message"]
    assert failed["steps"]["verify"]["passed"] is False and "rollback" not in failed["steps"]
    assert repo.digest("canary") is None


def test_rollback_to_an_unknown_version_lists_the_nearest(docker_client, images, repo):
    release(docker_client, images[0], repo, "1.0.0")
    with pytest.raises(Refused, match=r"1.4.0 does not exist.*Nearest releases: 1.0.0"):
        rollback(repo, "1.4.0")


def test_keep_deletes_the_oldest_but_never_a_channels_target(docker_client, images, repo):
    for patch, image in enumerate(images):
        release(docker_client, image, repo, f"1.0.{patch}")
    rollback(repo, "1.0.0", channel="stable")
    # 1.0.2 is the newest; 1.0.0 is the stable channel's target; 1.0.1 is what nobody points at
    assert retain(repo, 1, "latest").deleted == ("1.0.1",)
    assert repo.digest("1.0.1") is None
    assert repo.digest("1.0.0") == repo.digest("stable") and repo.digest("1.0.2") == repo.digest("latest")
    assert own(repo) == [
        "1",
        "1.0",
        "1.0.0",
        "1.0.2",
        "latest",
        "stable",
        "triton-release.rollback.stable",
    ]


def own(repo) -> list[str]:
    """The tags of `repo` but the ledger's entries (two a release: registry/ledger.py)."""
    return [t for t in repo.tags() if not is_ledger_tag(t)]


def emptied(docker_client, repo):
    """Delete every manifest left under `repo`'s tags (the test's registry tags go with them), and
    the local tags the pushes made."""
    for digest in {repo.digest(tag) for tag in repo.tags()} - {None}:
        repo.delete(digest)
    for image in docker_client.images.list(name=str(repo)):
        for tag in image.tags:
            if tag.startswith(f"{repo}:"):
                docker_client.images.remove(tag)


def test_keep_1_deletes_the_older_releases_each_its_own_x_y_target(docker_client, images, repo, caplog):
    try:
        for minor, image in enumerate(images):
            release(docker_client, image, repo, f"1.{minor}.0", f"{minor}" * 40)
        assert repo.digest("1.0") == repo.digest("1.0.0") and repo.digest("1.1") == repo.digest("1.1.0")
        retained = retain(repo, 1, "latest")
        assert retained.deleted == ("1.0.0", "1.1.0")
        assert retained.dropped == ("1.0", "1.1", f"sha-{'0' * 12}", f"sha-{'1' * 12}")
        assert retained.to_json()["tags_dropped"] == list(retained.dropped)
        assert own(repo) == ["1", "1.2", "1.2.0", "latest", f"sha-{'2' * 12}"]
        assert any("deleted 1.0.0, 1.1.0" in r.getMessage() and "1.0, 1.1" in r.getMessage() for r in caplog.records)
        assert retain(repo, 1, "latest").deleted == ()  # nothing more to delete
    finally:
        emptied(docker_client, repo)


def test_keep_keeps_what_a_channel_points_at_whatever_its_x_y_tags_say(docker_client, images, repo):
    try:
        for minor, image in enumerate(images):
            release(docker_client, image, repo, f"1.{minor}.0")
        rollback(repo, "1.1.0", channel="stable")
        repo.put_manifest("1.0", repo.manifest("1.2.0"))  # an X.Y pointing elsewhere is never dropped with 1.0.0
        retained = retain(repo, 1, "latest")
        assert retained.deleted == ("1.0.0",) and retained.dropped == ()
        assert retained.to_json()["kept_as_channel_targets"] == {"1.1.0": ["stable"]}
        assert own(repo) == [
            "1",
            "1.0",
            "1.1",
            "1.1.0",
            "1.2",
            "1.2.0",
            "latest",
            "stable",
            "triton-release.rollback.stable",
        ]
    finally:
        emptied(docker_client, repo)


def test_model_level_rollback_serves_an_earlier_version(docker_client, images):
    with TritonServer(images[1], {"a": 2}, load_timeout=60, client=docker_client) as server:
        done = rollback_model(server.http_url, "a", 1)
        assert done.version == 1
        ready = requests.get(f"http://{server.http_url}/v2/models/a/versions/1/ready", timeout=5)
        newest = requests.get(f"http://{server.http_url}/v2/models/a/versions/2/ready", timeout=5)
        assert ready.status_code == 200 and newest.status_code != 200


# -- a registry that wants a password -----------------------------------------------------------


def test_basic_auth_push_with_env_credentials_never_shows_the_password(
    docker_client, images, auth_registry, tmp_path, monkeypatch, capfd
):
    host, password = auth_registry
    target = f"{host}/publish/models"
    monkeypatch.setenv("TRITON_RELEASE_USERNAME", "ci-bot")
    monkeypatch.setenv("TRITON_RELEASE_PASSWORD", password)
    report = tmp_path / "r.json"
    assert main(["push", "--image", images[0], "--to", target, "--version", "1.0.0", "--report", str(report)]) == 0
    anonymous = RegistryRepository.parse(target)
    with pytest.raises(Refused, match="anonymously"):
        anonymous.tags()
    authed = RegistryRepository.parse(target, Credentials("ci-bot", password))
    assert own(authed) == ["1", "1.0", "1.0.0", "latest"]
    assert password not in repr(authed.credentials)
    monkeypatch.setenv("TRITON_RELEASE_PASSWORD", "wrong-" + password)
    code = main(["rollback", "--repo", target, "--to-version", "1.0.0", "--report", str(report)])
    assert code == 1
    out = capfd.readouterr()
    assert "ci-bot" in out.err and "TRITON_RELEASE_USERNAME" in out.err
    everything = out.out + out.err + report.read_text()
    assert password not in everything


def test_a_push_stopped_after_its_version_tag_is_finished_not_refused(docker_client, images, repo):
    from triton_release.registry import ledger
    from triton_release.registry.publish import daemon_push, finish_interrupted

    first, _ = release(docker_client, images[0], repo, "1.0.0")
    local = docker_client.images.get(images[1])
    local.tag(str(repo), "1.1.0")
    ledger.intend(repo, "1.1.0", "", local.id)  # as `push` enters the build before its manifest is put
    daemon_push(docker_client, repo, "1.1.0")  # 1.1.0 went up; the run stopped before confirming it or any tag
    assert "1.1.0" not in ledger.read_ledger(repo).releases
    assert repo.digest("latest") == first.digest
    assert finish_interrupted(repo, "latest").tags == ("1.1", "1", "latest")  # what `release` does on a rerun
    assert ledger.read_ledger(repo).entries["1.1.0"].digest == repo.digest("1.1.0")  # proven, and confirmed
    assert repo.digest("latest") == repo.digest("1.1") == repo.digest("1.1.0")
    rollback(repo, "1.0.0")
    assert finish_interrupted(repo, "latest").tags == ()  # a rollback is never undone by it
    again = push(images[1], repo, "1.1.0", client=docker_client)  # `push` rerun: the same image, so it resumes
    assert again.layers_uploaded == 0 and again.digest == repo.digest("1.1.0")


def test_a_channel_left_behind_is_finished_and_a_rollback_is_respected(docker_client, images, repo, image_tags):
    import io
    from datetime import datetime

    from triton_release.registry.publish import finish_interrupted

    def made_for(image: str, channel: str, created: str = "") -> str:
        """`image` with the labels a release writes: the channel it was made for, when it was made."""
        tag = f"{image}-{channel}-{len(image_tags)}"
        image_tags.append(tag)
        labels = f"LABEL triton-release.channel={channel}" + (
            f" org.opencontainers.image.created={created}" if created else ""
        )
        docker_client.images.build(
            fileobj=io.BytesIO(f"FROM {image}\n{labels}\n".encode()), tag=tag, rm=True, pull=False
        )
        return tag

    first, _ = release(docker_client, images[0], repo, "1.0.0")
    push(made_for(images[1], "latest"), repo, "1.1.0", client=docker_client)
    newest = repo.manifest("1.1.0")
    for tag in ("1.1", "1"):  # the moving tags went up, then the channel's PUT failed
        repo.put_manifest(tag, newest)
    assert finish_interrupted(repo, "beta").tags == ()  # a release made for latest never moves beta
    assert finish_interrupted(repo, "latest").tags == ("latest",)
    assert repo.digest("latest") == newest.digest
    rollback(repo, "1.0.0")  # a decision after 1.1.0 was built: a rerun respects it
    assert finish_interrupted(repo, "latest").tags == ()
    assert repo.digest("latest") == first.digest
    # a release built after that rollback, stopped before its tags: the rerun moves the channel again
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    third = push(made_for(images[2], "latest", created), repo, "1.2.0", client=docker_client)
    assert finish_interrupted(repo, "latest").tags == ("1.2", "1", "latest")
    assert repo.digest("latest") == third.digest
