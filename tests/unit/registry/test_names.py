"""Registry repositories read as Docker reads them: the docker SDK decides which part is the
registry (docker.io, index.docker.io and no host are Docker Hub), Docker Hub's API is
registry-1.docker.io, a one-component Hub name is library/NAME and refused, and Docker Hub's 429
says it is its pull rate limit. The requests go through a fake transport: no network."""

from __future__ import annotations

import time

import docker.auth
import pytest
import requests
from requests.adapters import BaseAdapter

from triton_release.contract import lower_cased, parse_repository, same_repository
from triton_release.errors import InfrastructureError, UsageError
from triton_release.registry.client import RegistryRepository, reset_in
from triton_release.registry.credentials import Credentials

# name as written -> (registry as Docker names it, path there, where its API answers)
NAMES = {
    "team/models": ("docker.io", "team/models", "registry-1.docker.io"),
    "docker.io/team/models": ("docker.io", "team/models", "registry-1.docker.io"),
    "index.docker.io/team/models": ("docker.io", "team/models", "registry-1.docker.io"),
    "localhost/x": ("localhost", "x", "localhost"),
    "localhost:5000/x": ("localhost:5000", "x", "localhost:5000"),
    "127.0.0.1:5000/a/b": ("127.0.0.1:5000", "a/b", "127.0.0.1:5000"),
    "ghcr.io/o/r/models": ("ghcr.io", "o/r/models", "ghcr.io"),
    "models": ("docker.io", "library/models", "registry-1.docker.io"),
    "docker.io/models": ("docker.io", "library/models", "registry-1.docker.io"),
    "team/a.b_c__d--e": ("docker.io", "team/a.b_c__d--e", "registry-1.docker.io"),
}


@pytest.mark.parametrize("ref", NAMES)
def test_a_name_resolves_as_the_docker_sdk_resolves_it(ref):
    found = parse_repository(ref)
    assert found is not None
    registry, path, api_host = NAMES[ref]
    assert (found.registry, found.path, found.api_host, found.ref) == (registry, path, api_host, ref)
    sdk_registry, sdk_path = docker.auth.resolve_repository_name(ref)
    assert found.registry == sdk_registry
    assert found.path in (sdk_path, f"library/{sdk_path}")  # the SDK leaves the Hub's library/ implicit


@pytest.mark.parametrize(
    "ref",
    [
        "Team/Models",  # upper case: lower_cased makes it team/models first
        "ghcr.io/org/models:1.0.0",  # a tag
        "team/models@sha256:" + "a" * 64,  # a digest
        "https://ghcr.io/org/models",  # a scheme
        "-bad.io/x",  # a host ending or starting with a hyphen
        "team//models",
        "team/models/",
        "team/-models",
        "",
        "team/models\n",
    ],
)
def test_anything_else_is_not_a_repository(ref):
    assert parse_repository(ref) is None


def test_upper_case_is_lower_cased_and_then_read_as_docker_reads_it():
    assert lower_cased("Team/Models") == "team/models"
    assert lower_cased("GHCR.io/MyOrg/Models") == "ghcr.io/myorg/models"
    assert lower_cased("Team/Models:V1") == "Team/Models:V1"  # a tag stays, to be refused
    assert lower_cased("team/\u212aelvin") == "team/\u212aelvin"  # not made ASCII by lower()
    repo = RegistryRepository.parse(lower_cased("Team/Models"))
    assert (repo.host, repo.name, str(repo)) == ("docker.io", "team/models", "team/models")


@pytest.mark.parametrize("ref", ["models", "docker.io/models", "index.docker.io/models", "docker.io/library/models"])
def test_a_docker_hub_name_without_a_namespace_is_refused_with_the_reason(ref):
    with pytest.raises(UsageError) as refused:
        RegistryRepository.parse(ref)
    message = refused.value.message
    assert "library/models" in message and "official images" in message and "NAMESPACE/models" in message
    assert refused.value.exit_code == 2


def test_an_invalid_name_is_a_usage_error_naming_the_docker_hub_form():
    with pytest.raises(UsageError, match="team/models for Docker Hub") as refused:
        RegistryRepository.parse("ghcr.io/org/models:latest")
    assert refused.value.exit_code == 2


def test_the_name_keeps_the_users_spelling_and_one_repository_is_one_whatever_its_spelling():
    for ref in ("docker.io/team/models", "index.docker.io/team/models", "team/models"):
        repo = RegistryRepository.parse(ref)
        assert str(repo) == ref and repo.host == "docker.io" and repo.api_host == "registry-1.docker.io"
        assert same_repository(ref, "team/models")  # the daemon's RepoDigests say team/models
    assert not same_repository("team/models", "ghcr.io/team/models")
    assert not same_repository("localhost/x", "localhost:5000/x")


class Recording(BaseAdapter):
    """A transport that records each request and answers with `answers` in turn (the last forever)."""

    def __init__(self, *answers: tuple[int, dict, bytes]) -> None:
        super().__init__()
        self.answers, self.urls = list(answers), []

    def send(self, request, **kwargs):
        self.urls.append(request.url)
        status, headers, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        answer = requests.Response()
        answer.status_code, answer.url, answer._content = status, request.url, body
        answer.headers.update(headers)
        answer.request = request
        return answer

    def close(self):
        pass


def recorded(ref: str, *answers: tuple[int, dict, bytes], credentials: Credentials | None = None):
    repo = RegistryRepository.parse(ref, credentials)
    transport = Recording(*answers)
    repo.session.mount("https://", transport)
    repo.session.mount("http://", transport)
    return repo, transport


@pytest.mark.parametrize("ref", ["team/models", "docker.io/team/models", "index.docker.io/team/models"])
def test_a_docker_hub_repository_is_asked_at_registry_1_docker_io(ref):
    repo, transport = recorded(ref, (200, {"Content-Type": "application/json"}, b'{"tags": ["1.0.0"]}'))
    assert repo.tags() == ["1.0.0"]
    assert transport.urls == ["https://registry-1.docker.io/v2/team/models/tags/list?n=1000"]


def test_docker_hubs_token_comes_from_the_realm_its_challenge_names():
    challenge = {
        "WWW-Authenticate": 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:team/models:pull"'
    }
    repo, transport = recorded(
        "team/models",
        (401, challenge, b""),
        (200, {"Content-Type": "application/json"}, b'{"token": "t"}'),
        (200, {"Content-Type": "application/json"}, b'{"tags": []}'),
    )
    assert repo.tags() == []
    assert transport.urls[0] == "https://registry-1.docker.io/v2/team/models/tags/list?n=1000"
    assert transport.urls[1].startswith("https://auth.docker.io/token?")
    assert "service=registry.docker.io" in transport.urls[1]
    assert transport.urls[2] == transport.urls[0]


def test_another_registry_is_asked_at_its_own_host():
    repo, transport = recorded("ghcr.io/o/r/models", (200, {}, b'{"tags": []}'))
    repo.tags()
    assert transport.urls == ["https://ghcr.io/v2/o/r/models/tags/list?n=1000"]


def test_docker_hubs_429_is_its_pull_rate_limit_when_it_resets_and_to_log_in():
    repo, transport = recorded("team/models", (429, {"Retry-After": "3600", "ratelimit-limit": "10;w=3600"}, b""))
    with pytest.raises(InfrastructureError) as failed:
        repo.manifest("1.0.0")
    message = failed.value.message
    assert "Docker Hub" in message and "pull rate limit" in message and "anonymous" in message
    assert "resets in 60 min" in message and "docker login" in message and "team/models" in message
    assert failed.value.exit_code == 3
    assert len(transport.urls) == 1  # a reset an hour away is not waited for


def test_docker_hubs_429_for_an_account_and_from_ratelimit_reset():
    repo, _ = recorded(
        "docker.io/team/models",
        (429, {"ratelimit-reset": str(int(time.time()) + 7200)}, b""),
        credentials=Credentials("alice", "s3cret-hub-pw", "auths in config.json"),
    )
    with pytest.raises(InfrastructureError) as failed:
        repo.tags()
    message = failed.value.message
    assert "for alice (auths in config.json)" in message and "resets in 2" in message
    assert "docker.io/team/models" in message and "s3cret-hub-pw" not in message


def test_another_registrys_429_is_still_an_overloaded_registry():
    repo, transport = recorded("ghcr.io/o/models", (429, {"Retry-After": "0"}, b""))
    with pytest.raises(InfrastructureError, match="is overloaded") as failed:
        repo.tags()
    assert "Docker Hub" not in failed.value.message and len(transport.urls) == 4


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "120"}, 120.0),
        ({"ratelimit-reset": "30"}, 30.0),
        ({"ratelimit-reset": "30;w=21600"}, 30.0),
        ({}, None),
        ({"Retry-After": "soon"}, None),
    ],
)
def test_reset_in_reads_retry_after_and_ratelimit_reset(headers, seconds):
    assert reset_in(headers) == seconds


def test_reset_in_reads_an_http_date_and_a_unix_time():
    from email.utils import formatdate

    assert 590 < reset_in({"Retry-After": formatdate(time.time() + 600, usegmt=True)}) <= 600
    assert 590 < reset_in({"ratelimit-reset": str(int(time.time()) + 600)}) <= 600


def test_the_daemons_digests_of_a_docker_hub_name_are_found_however_the_name_was_written():
    from types import SimpleNamespace

    from triton_release.registry.publish import pushed_digests

    digest = "sha256:" + "b" * 64
    local = SimpleNamespace(attrs={"RepoDigests": [f"team/models@{digest}", f"ghcr.io/team/models@sha256:{'c' * 64}"]})
    for ref in ("team/models", "docker.io/team/models", "index.docker.io/team/models"):
        assert pushed_digests(local, RegistryRepository.parse(ref)) == {digest}
    assert pushed_digests(local, RegistryRepository.parse("127.0.0.1:5000/team/models")) == set()


def test_another_registrys_long_retry_after_is_still_retried_four_times(monkeypatch):
    import triton_release.registry.client as client

    repo, transport = recorded("ghcr.io/o/models", (429, {"Retry-After": "3600"}, b""))
    waits: list[float] = []
    monkeypatch.setattr(client.time, "sleep", waits.append)
    with pytest.raises(InfrastructureError, match="after 4 attempts"):
        repo.tags()
    assert len(transport.urls) == 4 and waits == [8.0, 8.0, 8.0]


def test_the_command_line_refuses_a_hub_name_without_namespace_with_exit_2(tmp_path, capsys):
    from triton_release.cli.main import main

    report = tmp_path / "r.json"
    code = main(
        ["rollback", "--repo", "models", "--to-version", "1.0.0", "--report", str(report)], env={"HOME": str(tmp_path)}
    )
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "Docker Hub's library/models" in err and "nobody can push to" in err and "NAMESPACE/models" in err
