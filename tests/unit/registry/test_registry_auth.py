"""The registry client's bearer-token flow, retries and credential sources, against a loopback fake
token-auth registry (support.registries.FakeRegistry); the real registry tests are integration."""

from __future__ import annotations

import base64
import json

import pytest

from support.registries import FakeRegistry
from triton_release.errors import InfrastructureError, Refused
from triton_release.registry.client import RegistryRepository
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
    assert "scope=repository%3Ateam%2Fmodels%3Apull%2Cpush" in registry.token_requests[0]  # a token that can push


def test_wrong_credentials_are_refused_naming_the_user_not_the_password(registry):
    repo = RegistryRepository.parse(f"{registry.address}/team/models", Credentials(USER, "wrong-pw", "inputs"))
    with pytest.raises(Refused) as refused:
        repo.tags()
    assert "as bot (inputs)" in str(refused.value) and "wrong-pw" not in str(refused.value)


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
