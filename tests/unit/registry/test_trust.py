"""TLS as Docker trusts it and plain http only where Docker allows it (registry/trust.py), against
loopback fake registries (support.registries.FakeRegistry) behind a private CA the test makes
(support.tls): the system store (SSL_CERT_FILE, which truststore reads), the daemon's certs.d, and
registry_ca each trust it; nothing else does, and that is its own error. The real registry behind
TLS with token auth is tests/integration/test_tls_token_registry.py."""

from __future__ import annotations

import socket
import ssl

import pytest

from support.registries import FakeRegistry
from support.tls import CA_VARIABLES, PrivateCA
from triton_release.errors import InfrastructureError, UsageError
from triton_release.registry import client, trust
from triton_release.registry.client import RegistryRepository
from triton_release.registry.credentials import Credentials
from triton_release.registry.trust import Trust, UntrustedCertificate, insecure_in, is_loopback, split_host


@pytest.fixture(autouse=True)
def runner_like(monkeypatch):
    """No CA bundle variables (a runner sets none), and no scheme remembered from another test."""
    for name in CA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(client, "_SCHEMES", {})


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return PrivateCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def tls_registry(ca):
    with FakeRegistry(tls=ca.issue("registry").server_context()) as fake:
        yield fake


def tags_of(fake: FakeRegistry, trusted: Trust) -> list[str]:
    repo = RegistryRepository.parse(f"{fake.address}/team/models", Credentials("bot", "s3cret-pw"), trust=trusted)
    return repo.tags()


def test_a_certificate_from_a_ca_nothing_trusts_is_refused_naming_its_issuer_and_the_three_ways_to_trust_it(
    tls_registry, ca, tmp_path
):
    with pytest.raises(UntrustedCertificate) as refused:
        tags_of(tls_registry, Trust(certs_d=tmp_path))
    message = refused.value.message
    assert refused.value.exit_code == 3
    assert f"The registry {tls_registry.address} presented a TLS certificate issued by" in message
    assert f"CN={ca.name}" in message
    assert "update-ca-certificates" in message
    assert f"{tmp_path / tls_registry.address}/ca.crt" in message
    assert "registry_ca" in message and "--registry-ca" in message and "registry-ca" in message
    assert "unreachable" not in message and "make stack" not in message
    assert tls_registry.token_requests == []  # nothing was sent, credentials least of all


def test_the_system_store_trusts_it_as_update_ca_certificates_leaves_it(tls_registry, ca, tmp_path, monkeypatch):
    """truststore reads OpenSSL's default paths on Linux, which SSL_CERT_FILE names: the bundle an
    admin's update-ca-certificates writes, with the team's CA in it."""
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.system_store(tmp_path / "store")))
    assert tags_of(tls_registry, Trust(certs_d=tmp_path / "no-certs.d")) == ["1.0.0", "latest"]


def test_the_daemons_certs_d_folder_of_the_host_trusts_it(tls_registry, ca, tmp_path):
    root = ca.certs_d(tmp_path / "certs.d", tls_registry.address)
    assert tags_of(tls_registry, Trust(certs_d=root)) == ["1.0.0", "latest"]
    other = ca.certs_d(tmp_path / "other", "127.0.0.1:1")  # another host's folder trusts nothing here
    with pytest.raises(UntrustedCertificate):
        tags_of(tls_registry, Trust(certs_d=other))


def test_registry_ca_trusts_it_as_pem_text_or_as_a_file(tls_registry, ca, tmp_path):
    env = {trust.CERTS_D_VARIABLE: str(tmp_path / "no-certs.d")}
    assert tags_of(tls_registry, Trust.given(ca.pem, env)) == ["1.0.0", "latest"]
    assert tags_of(tls_registry, Trust.given(str(ca.cert), env)) == ["1.0.0", "latest"]


def test_registry_ca_that_is_no_certificate_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="neither PEM text nor a readable file"):
        Trust.given(str(tmp_path / "missing.crt"), {})
    with pytest.raises(UsageError, match="holds no CA certificate"):
        Trust.given("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----", {})


def test_a_certificate_issued_for_another_name_says_so(ca, tmp_path):
    elsewhere = ca.issue("elsewhere", hosts=("registry.example",)).server_context()
    with FakeRegistry(tls=elsewhere) as fake, pytest.raises(UntrustedCertificate, match=r"not issued for 127\.0\.0\.1"):
        tags_of(fake, Trust(ca=ca.pem, certs_d=tmp_path))


def test_a_client_certificate_without_its_key_is_refused_as_docker_refuses_it(ca, tmp_path):
    folder = tmp_path / "registry.example:5443"
    folder.mkdir()
    (folder / "client.cert").write_text(ca.pem)
    with pytest.raises(InfrastructureError, match="client certificate without its key client.key"):
        Trust(certs_d=tmp_path).context("registry.example:5443")


def test_a_client_certificate_pair_in_certs_d_is_presented(ca, tmp_path):
    """A registry that asks for a client certificate (mutual TLS) gets the certs.d pair."""
    issued = ca.issue("registry")
    server = issued.server_context()
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_verify_locations(cafile=str(ca.cert))
    client_pair = ca.issue("client", hosts=("triton-release",), client=True)
    with FakeRegistry(tls=server) as fake:
        folder = ca.certs_d(tmp_path, fake.address) / fake.address
        (folder / "client.cert").write_text(client_pair.cert.read_text())
        (folder / "client.key").write_text(client_pair.key.read_text())
        assert tags_of(fake, Trust(certs_d=tmp_path)) == ["1.0.0", "latest"]


def test_a_tls_registry_on_loopback_is_reached_over_tls_and_a_plain_one_over_http_each_asked_once(
    tls_registry, ca, tmp_path, monkeypatch
):
    asked: list[str] = []
    speaks = trust.speaks_tls
    monkeypatch.setattr(client, "speaks_tls", lambda host, context: asked.append(host) or speaks(host, context))
    secure = RegistryRepository.parse(f"{tls_registry.address}/team/models", trust=Trust(ca=ca.pem, certs_d=tmp_path))
    assert secure.base_url.startswith(f"https://{tls_registry.address}/")
    with FakeRegistry(auth=False) as plain:
        repo = RegistryRepository.parse(f"{plain.address}/team/models")
        assert repo.tags() == ["1.0.0", "latest"]
        assert repo.base_url.startswith(f"http://{plain.address}/")
        assert RegistryRepository.parse(f"{plain.address}/team/models").tags() == ["1.0.0", "latest"]
        assert plain.requests == [("GET", "/v2/team/models/tags/list?n=1000")] * 2  # the probe is no request
    assert asked == [tls_registry.address, plain.address]  # once per host and process


def test_the_tls_probe_of_a_plain_http_port_fails_at_once():
    """A plain-http server answers a ClientHello with a 400: the handshake fails in milliseconds."""
    with FakeRegistry(auth=False) as plain:
        assert trust.speaks_tls(plain.address, ssl.create_default_context()) is False
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{sock.getsockname()[1]}"
    assert trust.speaks_tls(free, ssl.create_default_context()) is None  # nothing listens: asked again next time


def test_a_registry_that_is_not_loopback_is_https_and_nothing_is_asked_before_it_fails(monkeypatch):
    """Credentials never go over plain http to another host: no probe, no daemon asked."""
    monkeypatch.setattr(trust, "daemon_insecure", lambda *_: pytest.fail("the daemon asked"))
    monkeypatch.setattr(client, "speaks_tls", lambda *_: pytest.fail("probed"))
    for host in ("registry.lan:5000", "10.1.2.3:5000", "ghcr.io"):
        assert RegistryRepository.parse(f"{host}/team/models").base_url == f"https://{host}/v2/team/models"


@pytest.mark.parametrize("insecure", [True, False])
def test_a_lan_registry_is_reached_over_http_only_when_the_daemon_lists_it_as_insecure(insecure, monkeypatch):
    """https first; when it cannot connect, the daemon is asked (only then) whether the registry
    is insecure, and only then is plain http tried (a plain-http fake stands in for the LAN host)."""
    asked: list[str] = []
    monkeypatch.setattr(client, "is_loopback", lambda _: False)
    monkeypatch.setattr(trust, "is_loopback", lambda _: False)
    monkeypatch.setattr(trust, "daemon_insecure", lambda host, *_: asked.append(host) or insecure)
    with FakeRegistry(auth=False) as lan:
        repo = RegistryRepository.parse(f"{lan.address}/team/models")
        assert repo.base_url.startswith("https://") and asked == []  # nothing asked before https failed
        if insecure:
            assert repo.tags() == ["1.0.0", "latest"] and repo.base_url.startswith("http://")
        else:
            with pytest.raises(InfrastructureError, match="answers plain http, not https") as refused:
                repo.tags()
            assert "insecure-registries" in refused.value.message
            assert lan.requests == []  # nothing went over plain http
        assert asked == [lan.address]


def test_docker_info_says_which_registries_are_insecure():
    info = {
        "RegistryConfig": {
            "InsecureRegistryCIDRs": ["127.0.0.0/8", "10.0.0.0/8"],
            "IndexConfigs": {
                "docker.io": {"Name": "docker.io", "Secure": True},
                "registry.lan:5000": {"Name": "registry.lan:5000", "Secure": False},
            },
        }
    }
    assert insecure_in(info, "registry.lan:5000")
    assert insecure_in(info, "10.1.2.3:5000")
    assert not insecure_in(info, "192.168.1.2:5000")
    assert not insecure_in(info, "docker.io")
    assert not insecure_in({}, "registry.lan:5000")


def test_loopback_is_what_docker_calls_loopback():
    assert all(map(is_loopback, ["127.0.0.1:5000", "127.1.2.3", "localhost:5000", "[::1]:5000", "LOCALHOST"]))
    assert not any(map(is_loopback, ["128.0.0.1:5000", "localhost.example:5000", "registry:5000", "[::2]:5000"]))
    assert split_host("[::1]:5000", 443) == ("::1", 5000)
    assert split_host("ghcr.io", 443) == ("ghcr.io", 443)
