"""Registries as Docker reaches them, on the real registry and daemon: credentials from a Docker
credential helper (a `docker-credential-*` script on the test's PATH, named by a test Docker
config's credHelpers and credsStore) over the password-protected registry; and a Docker Hub name
(`team/models`) whose API host, registry-1.docker.io, is the stack's registry standing in.

No product setting maps Docker Hub elsewhere: the test carries registry-1.docker.io's requests to
the local registry at the transport (as a hosts entry and a TLS-terminating proxy would), keeping
their Host so that the registry's upload locations name registry-1.docker.io."""

from __future__ import annotations

import io
import json
import os
import tarfile
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests
from requests.adapters import HTTPAdapter

from support.credential_helpers import helper_calls, write_docker_config, write_helper
from support.stack import REGISTRY
from triton_release.cli.main import main
from triton_release.registry import client as registry_client
from triton_release.registry.client import Manifest, RegistryRepository, content_digest
from triton_release.registry.credentials import Credentials

pytestmark = pytest.mark.integration

SCHEMA2 = "application/vnd.docker.distribution.manifest.v2+json"


@pytest.fixture
def tiny(docker_client, unique):
    """A one-file image imported from a tarball (no base, a few hundred bytes), removed afterwards
    with every tag a push gave it."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        payload = f"credential helper {unique}".encode()
        info = tarfile.TarInfo("payload")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    tag = f"triton-release-test/helper:{unique}"
    docker_client.api.import_image_from_data(data.getvalue(), repository=tag.split(":")[0], tag=unique)
    image = docker_client.images.get(tag)
    yield tag
    docker_client.images.remove(image.id, force=True)


@pytest.fixture
def helper_place(tmp_path, monkeypatch):
    """A PATH folder for helpers and an empty DOCKER_CONFIG, no TRITON_RELEASE_* credentials."""
    bin_dir, config_dir = tmp_path / "bin", tmp_path / "docker"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_CONFIG", str(config_dir))
    monkeypatch.delenv("TRITON_RELEASE_USERNAME", raising=False)
    monkeypatch.delenv("TRITON_RELEASE_PASSWORD", raising=False)
    return bin_dir, config_dir


def test_a_credential_helper_logs_the_push_in_and_its_secret_shows_nowhere(
    auth_registry, tiny, helper_place, unique, tmp_path, capfd
):
    host, password = auth_registry
    bin_dir, config_dir = helper_place
    write_helper(bin_dir, "testhelper", {host: ("ci-bot", password)})
    write_helper(bin_dir, "teststore", {host: ("ci-bot", "wrong-" + password)})  # credHelpers wins for the host
    config = write_docker_config(config_dir, creds_store="teststore", cred_helpers={host: "testhelper"})
    target = f"{host}/helper/models-{unique}"
    report = tmp_path / "push.json"

    code = main(["push", "--image", tiny, "--to", target, "--version", "1.0.0", "--report", str(report), "--debug"])

    out = capfd.readouterr()
    assert code == 0, out.err
    pushed = json.loads(report.read_text())["steps"]["push"]
    assert pushed["credentials_source"] == f"docker-credential-testhelper (credHelpers in {config})"
    assert helper_calls(bin_dir, "testhelper")[0] == {"argv": ["get"], "stdin": host}
    assert helper_calls(bin_dir, "teststore") == []
    assert password not in out.out + out.err + report.read_text()
    # the tags are in the registry, readable with the helper's credentials only, and pull back whole
    authed = RegistryRepository.parse(target, Credentials("ci-bot", password))
    assert {"1.0.0", "1.0", "1", "latest"} <= set(authed.tags())
    manifest = authed.manifest("latest")
    assert manifest is not None and manifest.digest == pushed["digest"]
    assert all(content_digest(authed.blob(layer["digest"])) == layer["digest"] for layer in manifest.layers)


def test_creds_store_alone_serves_a_rollback(auth_registry, tiny, helper_place, unique, tmp_path, capfd):
    host, password = auth_registry
    bin_dir, config_dir = helper_place
    write_helper(bin_dir, "teststore", {host: ("ci-bot", password)})
    write_docker_config(config_dir, creds_store="teststore")
    target = f"{host}/store/models-{unique}"
    assert main(["push", "--image", tiny, "--to", target, "--version", "1.0.0", "--channel", "stable"]) == 0
    report = tmp_path / "rollback.json"
    code = main(["rollback", "--repo", target, "--to-version", "1.0.0", "--report", str(report), "--debug"])
    out = capfd.readouterr()
    assert code == 0, out.err
    assert json.loads(report.read_text())["steps"]["rollback"]["to_version"] == "1.0.0"
    assert {call["stdin"] for call in helper_calls(bin_dir, "teststore")} == {host}
    assert password not in out.out + out.err + report.read_text()


def test_a_failing_helper_is_named_and_the_registry_refuses_the_anonymous_push(
    auth_registry, tiny, helper_place, unique, tmp_path, capfd
):
    host, password = auth_registry
    bin_dir, config_dir = helper_place
    write_helper(bin_dir, "testhelper", {host: ("ci-bot", password)}, behaviour="fail")
    config = write_docker_config(config_dir, cred_helpers={host: "testhelper"})
    report = tmp_path / "push.json"

    code = main(["push", "--image", tiny, "--to", f"{host}/broken/models-{unique}", "--version", "1.0.0",
                 "--report", str(report)])  # fmt: skip

    out = capfd.readouterr()
    err = " ".join((out.out + out.err).split())  # warnings on stdout, the failure on stderr
    assert code == 1, err
    assert f"docker-credential-testhelper (credHelpers in {config}) failed (exit status 3" in err
    assert "the registry is reached anonymously" in err
    assert f"The registry {host} refused to" in err and "anonymously (HTTP 401)" in err
    assert password not in err + report.read_text()


# -- Docker Hub's API host, stood in for by the stack's registry ------------------------------------


class HubStandIn(HTTPAdapter):
    """registry-1.docker.io's requests carried to the stack's registry over loopback: the Host
    header stays registry-1.docker.io and X-Forwarded-Proto https, as behind a TLS proxy."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def send(self, request, **kwargs):
        parts = urlsplit(request.url)
        assert (parts.scheme, parts.netloc) == ("https", "registry-1.docker.io"), request.url
        self.seen.append(request.url)
        request.url = urlunsplit(("http", REGISTRY, parts.path, parts.query, ""))
        request.headers["Host"] = "registry-1.docker.io"
        request.headers["X-Forwarded-Proto"] = "https"
        return super().send(request, **kwargs)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """Every registry client of the test's process reaches registry-1.docker.io through one
    HubStandIn; the Docker config is empty (anonymous)."""
    stand_in, made = HubStandIn(), registry_client.watched_session

    def session(*args, **kwargs) -> requests.Session:
        own = made(*args, **kwargs)
        own.mount("https://registry-1.docker.io/", stand_in)
        return own

    monkeypatch.setattr(registry_client, "watched_session", session)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "empty-docker-config"))
    monkeypatch.delenv("TRITON_RELEASE_USERNAME", raising=False)
    monkeypatch.delenv("TRITON_RELEASE_PASSWORD", raising=False)
    return stand_in


def image(repo: RegistryRepository, text: str) -> Manifest:
    """A one-layer image pushed blob by blob through the client; its manifest, not yet tagged."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("payload")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text.encode()))
    layer_digest = repo.put_blob(layer.getvalue())
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Labels": {"org.opencontainers.image.version": text}},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }  # fmt: skip
    ).encode()
    config_digest = repo.put_blob(config)
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": SCHEMA2,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": config_digest,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar",
                    "size": len(layer.getvalue()),
                    "digest": layer_digest,
                }
            ],
        }  # fmt: skip
    ).encode()
    return Manifest.of(SCHEMA2, body)


def test_a_docker_hub_name_is_pushed_read_and_rolled_back_at_registry_1_docker_io(hub, unique, tmp_path):
    name = f"team/models-{unique}"
    repo = RegistryRepository.parse(name)
    assert (str(repo), repo.host, repo.name) == (name, "docker.io", name)
    first, second = image(repo, "1.0.0"), image(repo, "1.1.0")
    local = RegistryRepository.parse(f"{REGISTRY}/{name}")  # the same storage, by its own address
    try:
        for tag, manifest in (("1.0.0", first), ("1.1.0", second), ("latest", second)):
            assert repo.put_manifest(tag, manifest) == manifest.digest
        assert {"1.0.0", "1.1.0", "latest"} <= set(repo.tags())
        assert hub.seen[0].startswith(f"https://registry-1.docker.io/v2/{name}/")
        assert all(url.startswith("https://registry-1.docker.io/v2/") for url in hub.seen)

        report = tmp_path / "rollback.json"
        assert main(["rollback", "--repo", f"docker.io/{name}", "--to-version", "1.0.0", "--report", str(report)]) == 0
        rolled = json.loads(report.read_text())["steps"]["rollback"]
        assert rolled["repository"] == f"docker.io/{name}"  # as written
        assert local.digest("latest") == first.digest  # moved in the stand-in registry itself
    finally:
        for manifest in (first, second):
            local.delete(manifest.digest)
        for tag in local.tags():
            digest = local.digest(tag)
            if digest:
                local.delete(digest)
