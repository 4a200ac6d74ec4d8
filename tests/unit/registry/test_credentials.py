"""Where credentials come from, in order: the inputs, TRITON_RELEASE_USERNAME/_PASSWORD, then the
Docker config as the Docker CLI reads it (credHelpers, else credsStore, then auths), with helper
scripts speaking the helper protocol (support/credential_helpers.py). A failing helper is a
warning naming it, and the next source is read."""

from __future__ import annotations

import logging
import os

import pytest

from support.credential_helpers import helper_calls, write_docker_config, write_helper
from triton_release.registry.client import open_repository
from triton_release.registry.credentials import Credentials, docker_config_credentials, find_credentials

HOST = "registry.example:5000"
HUB_KEY = "https://index.docker.io/v1/"


@pytest.fixture
def place(tmp_path):
    """(env, bin folder, config folder): a PATH holding only the test's helpers, and DOCKER_CONFIG."""
    bin_dir, config_dir = tmp_path / "bin", tmp_path / "docker"
    bin_dir.mkdir()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "DOCKER_CONFIG": str(config_dir),
        "HOME": str(tmp_path),
    }
    return env, bin_dir, config_dir


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "triton_release" and r.levelno == logging.WARNING]


def test_the_order_inputs_environment_cred_helper_creds_store_auths(place, caplog):
    env, bin_dir, config_dir = place
    write_helper(bin_dir, "perhost", {HOST: ("helper-user", "helper-secret")})
    write_helper(bin_dir, "store", {HOST: ("store-user", "store-secret"), "other.example": ("o", "o-secret")})
    config = write_docker_config(
        config_dir,
        auths={HOST: ("auths-user", "auths-pw"), "third.example": ("t", "t-pw")},
        creds_store="store",
        cred_helpers={HOST: "perhost"},
    )
    assert find_credentials(HOST, env, "input-user", "input-pw") == Credentials("input-user", "input-pw", "inputs")
    both = {**env, "TRITON_RELEASE_USERNAME": "env-user", "TRITON_RELEASE_PASSWORD": "env-pw"}
    assert find_credentials(HOST, both).source == "TRITON_RELEASE_USERNAME/_PASSWORD"
    assert find_credentials(HOST, env) == Credentials(
        "helper-user", "helper-secret", f"docker-credential-perhost (credHelpers in {config})"
    )
    assert find_credentials("other.example", env) == Credentials(
        "o", "o-secret", f"docker-credential-store (credsStore in {config})"
    )
    # the store does not know it ("credentials not found"): auths, without a warning
    assert find_credentials("third.example", env) == Credentials("t", "t-pw", f"auths in {config}")
    assert find_credentials("nowhere.example", env) is None
    assert warnings_of(caplog) == []


def test_a_helper_gets_get_as_its_only_argument_and_the_host_on_stdin(place):
    env, bin_dir, config_dir = place
    write_helper(bin_dir, "perhost", {HOST: ("helper-user", "helper-secret")})
    write_docker_config(config_dir, cred_helpers={HOST: "perhost"})
    assert docker_config_credentials(HOST, env).password == "helper-secret"
    assert helper_calls(bin_dir, "perhost") == [{"argv": ["get"], "stdin": HOST}]


def test_docker_hub_is_keyed_by_its_index_url_in_a_store_and_in_auths(place):
    env, bin_dir, config_dir = place
    write_helper(bin_dir, "desktop", {HUB_KEY: ("hub-user", "hub-token")})
    write_docker_config(config_dir, creds_store="desktop")
    repo = open_repository("team/models", env)
    assert repo.credentials.username == "hub-user" and repo.credentials.password == "hub-token"
    assert helper_calls(bin_dir, "desktop") == [{"argv": ["get"], "stdin": HUB_KEY}]
    write_docker_config(config_dir, auths={HUB_KEY: ("auths-hub", "pw")})
    for ref in ("docker.io/team/models", "index.docker.io/team/models", "team/models"):
        assert open_repository(ref, env).credentials.username == "auths-hub"
    assert open_repository("ghcr.io/team/models", env).credentials is None


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        ("missing", "is not installed or not on PATH"),
        ("fail", "failed (exit status 3: helper error: the keychain is locked)"),
        ("garbage", "answered with something that is not credentials"),
    ],
)
def test_a_failing_helper_is_a_warning_naming_it_and_auths_is_next(place, caplog, behaviour, said):
    env, bin_dir, config_dir = place
    if behaviour != "missing":
        write_helper(bin_dir, "broken", {HOST: ("helper-user", "helper-secret")}, behaviour=behaviour)
    config = write_docker_config(config_dir, auths={HOST: ("auths-user", "auths-pw")}, cred_helpers={HOST: "broken"})
    assert docker_config_credentials(HOST, env) == Credentials("auths-user", "auths-pw", f"auths in {config}")
    [warning] = warnings_of(caplog)
    assert warning.startswith(f"The Docker credential helper docker-credential-broken (credHelpers in {config}) {said}")
    assert f"the registry is reached with auths in {config}" in warning
    assert "helper-secret" not in warning and "helper-secret" not in caplog.text


def test_a_failing_helper_with_nothing_after_it_leaves_the_registry_anonymous(place, caplog):
    env, bin_dir, config_dir = place
    write_helper(bin_dir, "broken", {HOST: ("u", "s")}, behaviour="fail")
    write_docker_config(config_dir, creds_store="broken")
    assert docker_config_credentials(HOST, env) is None
    [warning] = warnings_of(caplog)
    assert "docker-credential-broken (credsStore in" in warning and "reached anonymously" in warning


def test_a_helper_is_found_on_the_path_given_not_the_processes(place, tmp_path):
    env, bin_dir, config_dir = place
    elsewhere = tmp_path / "elsewhere"
    write_helper(elsewhere, "perhost", {HOST: ("u", "s")})
    write_docker_config(config_dir, cred_helpers={HOST: "perhost"})
    assert docker_config_credentials(HOST, env) is None
    assert docker_config_credentials(HOST, {**env, "PATH": str(elsewhere)}) == Credentials(
        "u", "s", f"docker-credential-perhost (credHelpers in {config_dir / 'config.json'})"
    )


def test_an_identity_token_is_a_warning_not_a_password(place, caplog):
    env, bin_dir, config_dir = place
    write_helper(bin_dir, "acr", {HOST: ("<token>", "refresh-token-secret")})
    write_docker_config(config_dir, cred_helpers={HOST: "acr"})
    assert docker_config_credentials(HOST, env) is None
    [warning] = warnings_of(caplog)
    assert "identity token" in warning and "refresh-token-secret" not in caplog.text


def test_no_config_file_no_credentials_and_a_broken_auths_entry_is_a_warning(place, caplog):
    env, _, config_dir = place
    assert docker_config_credentials(HOST, env) is None
    config_dir.mkdir()
    (config_dir / "config.json").write_text('{"auths": {"x.example": "not an entry"}}')
    assert docker_config_credentials(HOST, env) is None
    [warning] = warnings_of(caplog)
    assert str(config_dir / "config.json") in warning and "not used" in warning


def test_the_docker_config_is_found_under_home_without_docker_config(tmp_path):
    config = write_docker_config(tmp_path / ".docker", auths={HOST: ("home-user", "pw")})
    assert docker_config_credentials(HOST, {"HOME": str(tmp_path)}) == Credentials(
        "home-user", "pw", f"auths in {config}"
    )
