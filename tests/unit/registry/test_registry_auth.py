"""The registry client's bearer-token flow, retries and credential sources, against a loopback fake
token-auth registry (support.registries.FakeRegistry); the real registry tests are integration."""

from __future__ import annotations

import base64
import json
from urllib.parse import unquote

import pytest

from support.registries import FakeRegistry
from triton_release.errors import InfrastructureError, Refused
from triton_release.registry.client import Manifest, RegistryRepository
from triton_release.registry.credentials import (
    Credentials,
    docker_config_credentials,
    find_credentials,
    unpaired_credentials,
)

USER, PASSWORD, TOKEN = "bot", "s3cret-pw", "tok-123"


@pytest.fixture
def registry():
    with FakeRegistry(user=USER, password=PASSWORD, token=TOKEN) as fake:
        yield fake


def test_bearer_challenge_is_answered_with_a_token_from_the_realm(registry):
    repo = RegistryRepository.parse(f"{registry.address}/team/models", Credentials(USER, PASSWORD))
    assert repo.tags() == ["1.0.0", "latest"]
    assert "service=test-registry" in registry.token_requests[0]
    assert "scope=repository%3Ateam%2Fmodels%3Apull&" in registry.token_requests[0] + "&"  # a read asks pull alone


def test_each_request_asks_the_token_service_for_what_it_needs_and_each_token_is_kept_per_scope(registry):
    """pull for reads, pull,push for writes, delete for a DELETE (retention): a token is asked once
    per set of actions, never more than the request needs."""
    registry.hook = _deletes
    repo = RegistryRepository.parse(f"{registry.address}/team/models", Credentials(USER, PASSWORD))
    manifest = Manifest.of("application/vnd.oci.image.manifest.v1+json", b'{"schemaVersion": 2}')
    repo.tags()
    repo.put_manifest("2.0.0", manifest)
    repo.tags()
    repo.manifest("2.0.0")
    repo.delete(manifest.digest)
    repo.put_manifest("2.0.1", manifest)
    scopes = [unquote(path.partition("scope=")[2].split("&")[0]) for path in registry.token_requests]
    assert scopes == [
        "repository:team/models:pull",
        "repository:team/models:pull,push",
        "repository:team/models:delete",
    ]


def test_a_token_refused_for_delete_says_delete_permission_is_what_is_missing(registry):
    """bob may pull and push, not delete: the token service grants less than asked, the registry
    answers the DELETE 401, and the message names the permission, not the password."""
    registry.hook = _no_delete
    repo = RegistryRepository.parse(f"{registry.address}/team/models", Credentials(USER, PASSWORD, "inputs"))
    with pytest.raises(Refused) as refused:
        repo.delete("sha256:" + "0" * 64)
    assert "refused to delete sha256:" in refused.value.message
    assert "needs the delete permission on team/models" in refused.value.message
    assert PASSWORD not in refused.value.message


def _deletes(handler) -> bool:
    if handler.command != "DELETE" or handler.headers.get("Authorization") != f"Bearer {TOKEN}":
        return False
    handler._send(202)
    return True


def _no_delete(handler) -> bool:
    if handler.command != "DELETE" or "Bearer" not in handler.headers.get("Authorization", ""):
        return False
    handler._send(401, {"errors": [{"code": "UNAUTHORIZED"}]}, {"WWW-Authenticate": 'Bearer realm="x"'})
    return True


def test_wrong_credentials_are_refused_naming_the_user_not_the_password(registry):
    repo = RegistryRepository.parse(f"{registry.address}/team/models", Credentials(USER, "wrong-pw", "inputs"))
    with pytest.raises(Refused) as refused:
        repo.tags()
    assert "as bot (inputs)" in str(refused.value) and "wrong-pw" not in str(refused.value)
    assert "token service" in str(refused.value) and "the username or the password (token) is wrong" in str(
        refused.value
    )


def test_429_is_retried_with_backoff_and_then_given_up(registry):
    repo = RegistryRepository.parse(f"{registry.address}/team/models", Credentials(USER, PASSWORD))
    registry.busy = 2
    assert repo.tags() == ["1.0.0", "latest"]
    registry.busy = 100
    with pytest.raises(InfrastructureError, match=r"is overloaded .*HTTP 429, after 4 attempts"):
        RegistryRepository.parse(f"{registry.address}/team/models", Credentials(USER, PASSWORD)).tags()


def test_credentials_come_from_inputs_then_environment_then_docker_config(tmp_path):
    env = {"DOCKER_CONFIG": str(tmp_path)}
    auth = base64.b64encode(b"docker-user:docker-pw").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"ghcr.io": {"auth": auth}}}))
    assert docker_config_credentials("ghcr.io", env) == Credentials(
        "docker-user", "docker-pw", f"auths in {tmp_path / 'config.json'}"
    )
    assert find_credentials("ghcr.io", env).username == "docker-user"
    env.update(TRITON_RELEASE_USERNAME="env-user", TRITON_RELEASE_PASSWORD="env-pw")
    assert find_credentials("ghcr.io", env).username == "env-user"
    assert find_credentials("ghcr.io", env, "input-user", "input-pw").source == "inputs"
    assert "env-pw" not in repr(find_credentials("ghcr.io", env))


def test_a_lone_username_or_password_is_a_warning_naming_the_missing_one():
    """Half a login is never used (a push is then anonymous: 401 on ghcr.io), so each door says so."""
    assert unpaired_credentials({}, "bot", "pw") == unpaired_credentials({}) == []
    [lone_password] = unpaired_credentials({}, "", "pw")
    assert lone_password.startswith("the action's input password is given without the action's input username:")
    assert "neither is used" in lone_password and "pw" not in lone_password.replace("password", "")
    [lone_user] = unpaired_credentials({"TRITON_RELEASE_USERNAME": "bot"})
    assert lone_user.startswith("TRITON_RELEASE_USERNAME is given without TRITON_RELEASE_PASSWORD:")
    assert find_credentials("ghcr.io", {"TRITON_RELEASE_USERNAME": "bot", "HOME": "/nonexistent"}, "", "pw") is None


def test_retention_refused_its_delete_says_it_needs_delete_permission_and_the_release_is_out():
    """--keep 1 with credentials that may push but not delete: the newest release is out; the
    refusal says what retention needs, not that the release failed."""
    from support.registries import MemoryRegistry
    from triton_release.registry import publish

    class NoDelete(MemoryRegistry):
        def delete(self, digest: str) -> None:
            raise Refused(f"The registry refused to delete {digest}: deleting needs the delete permission.")

    registry = NoDelete()
    for version in ("1.0.0", "1.1.0"):
        manifest = registry.image({}, layer=version)
        registry.put_manifest(version, manifest)
    registry.put_manifest("latest", registry.manifests["1.1.0"])
    with pytest.raises(Refused) as refused:
        publish.retain(registry, 1, "latest")
    message = refused.value.message
    assert "Retention (--keep 1, the keep setting) needs that permission to delete 1.0.0" in message
    assert "The release itself is out: 1.1.0 is pushed" in message
