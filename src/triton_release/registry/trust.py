"""TLS to a registry as Docker trusts it, and plain http only where Docker allows it.

A registry's certificate is verified against the system trust store (through `truststore`: on
Linux OpenSSL's default paths, which `update-ca-certificates` fills), plus what the Docker daemon
uses for that registry host, `/etc/docker/certs.d/HOST[:PORT]/` (`*.crt` CAs, a `*.cert` and
`*.key` client certificate pair), plus the `registry_ca` setting (PEM: the action's container sees
neither the host's store nor its certs.d). A certificate none of them trusts is `UntrustedCertificate`,
naming the host, the certificate's issuer, and the three ways to trust it.

Plain http only to loopback (127.0.0.0/8, ::1, localhost) and to the daemon's insecure registries
(`docker info`), and only when the host does not speak TLS: a TLS registry there is reached over
TLS, and verified.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from triton_release.errors import InfrastructureError, UsageError

CERTS_D = Path("/etc/docker/certs.d")  # the daemon's, as Docker reads it
CERTS_D_VARIABLE = "TRITON_RELEASE_DOCKER_CERTS_D"  # another folder in its place (tests, rootless Docker)
HANDSHAKE_TIMEOUT = 5.0  # seconds for a loopback or insecure registry to answer a ClientHello


class UntrustedCertificate(InfrastructureError):
    """The registry's TLS certificate is signed by a CA this machine does not trust."""


@dataclass(frozen=True)
class Trust:
    """What a registry's TLS certificate is verified against beside the system store: the daemon's
    certs.d folder (`certs_d`) and the `registry_ca` setting's PEM text (`ca`)."""

    ca: str = field(default="", repr=False)  # PEM text of CA certificates; "" for none
    certs_d: Path = CERTS_D
    # DOCKER_HOST and the like: the daemon asked which registries are insecure (default: the local socket)
    docker_env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def given(cls, registry_ca: str | None, env: Mapping[str, str]) -> Trust:
        """The trust of a run: the `registry_ca` setting (PEM text, or the path of a PEM file) read
        and checked now, and the certs.d folder (TRITON_RELEASE_DOCKER_CERTS_D in `env`, else the daemon's)."""
        certs_d = Path(env.get(CERTS_D_VARIABLE) or CERTS_D)
        docker_env = {key: value for key, value in env.items() if key.startswith("DOCKER_")}
        if not registry_ca:
            return cls("", certs_d, docker_env)
        text = registry_ca.strip()
        if not text.startswith("-----BEGIN"):
            try:
                text = Path(text).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"""
                    registry_ca {registry_ca!r} is neither PEM text nor a readable file
                    ({exc.__class__.__name__}). Give the CA certificate that signs the registry's
                    certificate, as PEM (-----BEGIN CERTIFICATE-----) or as the path of a .crt file.""") from None
        try:
            ssl.create_default_context(cadata=text + "\n")
        except (ssl.SSLError, ValueError):
            raise UsageError("""
                registry_ca holds no CA certificate that can be read (PEM, -----BEGIN CERTIFICATE-----).
                Give the CA certificate that signs the registry's certificate, e.g. the ca.crt of
                /etc/docker/certs.d/HOST:PORT/.""") from None
        return cls(text + "\n", certs_d, docker_env)

    def plain_http_allowed(self, host: str) -> bool:
        """Whether Docker would reach `host` over plain http when it speaks no TLS: loopback, or a
        registry the daemon lists as insecure (asked only for hosts that are not loopback)."""
        return is_loopback(host) or daemon_insecure(host, self.docker_env)

    def folder(self, host: str) -> Path:
        """The daemon's certs.d folder of `host` (host[:port], as the repository names it)."""
        return self.certs_d / host

    def context(self, host: str) -> ssl.SSLContext:
        """An SSLContext that verifies against the system store, `host`'s certs.d and registry_ca,
        and presents `host`'s client certificate when certs.d holds one."""
        import truststore

        context = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        folder = self.folder(host)
        try:
            names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        except OSError:
            names = []
        for name in names:
            path = folder / name
            try:
                if name.endswith(".crt"):
                    context.load_verify_locations(cafile=str(path))
                elif name.endswith(".cert"):
                    key = path.with_suffix(".key")
                    if not key.is_file():
                        raise InfrastructureError(f"""
                            {path} is a client certificate without its key {key.name} beside it. Docker
                            refuses such a folder too: add the key, or remove the certificate.""")
                    context.load_cert_chain(str(path), str(key))
            except (ssl.SSLError, OSError) as exc:
                what = "a CA certificate" if name.endswith(".crt") else "a client certificate and its key"
                raise InfrastructureError(f"""
                    {path} could not be read as {what} ({exc.__class__.__name__}: {exc}). Fix or remove it:
                    Docker reads the same folder.""") from None
        if self.ca:
            context.load_verify_locations(cadata=self.ca)
        return context

    def untrusted(
        self, host: str, failure: ssl.SSLCertVerificationError, *, registry: str | None = None
    ) -> UntrustedCertificate:
        """The error for a certificate of `host` (the registry, or its token service) that failed
        verification: one issued for another name, or one whose issuer (named) nothing here trusts.
        `registry`: the registry whose certs.d folder trusts it (Docker's, for its token service too)."""
        if failure.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
            return UntrustedCertificate(f"""
                The registry {host} presented a TLS certificate that is not issued for {split_host(host, 443)[0]}
                ({failure.verify_message}), so nothing was sent to it. Use the name the certificate is
                issued for in the repository, or give the registry a certificate for this name.""")
        issuer = certificate_issuer(host, split_host(host, 443)[1])
        folder = self.folder(registry or host)
        who = (
            f"The registry {host}"
            if registry in (None, host)
            else f"The token service {host} of the registry {registry}"
        )
        return UntrustedCertificate(f"""
            {who} presented a TLS certificate issued by {issuer}, which this machine does
            not trust, so nothing was sent to it. Trust that CA as Docker does, in one of three ways: add
            it to the system store (copy it to /usr/local/share/ca-certificates/ and run
            update-ca-certificates); put it in the Docker daemon's {folder}/ca.crt; or give it as the
            registry_ca setting (--registry-ca PEM|FILE, the action's input registry-ca), which a
            container action needs, since it sees neither the host's store nor its certs.d.""")


def certificate_issuer(host: str, port: int) -> str:
    """The issuer of the certificate `host`:`port` presents, as `CN=..., O=...` (read without
    verifying it: only to name it); "an unknown issuer" when it cannot be read."""
    from cryptography import x509

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        name = split_host(host, port)[0]
        with (
            socket.create_connection((name, port), timeout=HANDSHAKE_TIMEOUT) as sock,
            context.wrap_socket(sock, server_hostname=name) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).issuer.rfc4514_string() if der else "an unknown issuer"
    except (OSError, ValueError):
        return "an unknown issuer"


def split_host(host: str, default_port: int) -> tuple[str, int]:
    """(name, port) of a registry host `name[:port]` or `[v6]:port`."""
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        return name, int(rest[1:]) if rest.startswith(":") else default_port
    if host.count(":") == 1:
        name, _, port = host.partition(":")
        return name, int(port) if port.isdigit() else default_port
    return host, default_port


def is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1: the registries Docker always reaches over plain http when they speak no TLS."""
    name, _ = split_host(host.lower(), 0)
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def insecure_in(info: Mapping, host: str) -> bool:
    """Whether the daemon's `docker info` lists `host` as insecure: its RegistryConfig's
    IndexConfigs entry says Secure false, or its address lies in InsecureRegistryCIDRs."""
    config = info.get("RegistryConfig") or {}
    entry = (config.get("IndexConfigs") or {}).get(host) or {}
    if entry.get("Secure") is False:
        return True
    name, _ = split_host(host, 0)
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        try:
            address = ipaddress.ip_address(socket.gethostbyname(name))
        except (OSError, ValueError):
            return False
    for cidr in config.get("InsecureRegistryCIDRs") or []:
        try:
            if address in ipaddress.ip_network(cidr, strict=False):
                return True
        except ValueError:
            continue
    return False


def speaks_tls(host: str, context: ssl.SSLContext) -> bool | None:
    """Whether `host` (port 443 when it names none) answers a TLS ClientHello as a TLS server: True
    (its certificate verified or not), False (something answers, not in TLS: a plain-http registry
    answers garbage such as a 400 and the handshake fails at once), None (nothing answers there)."""
    name, port = split_host(host, 443)
    try:
        with (
            socket.create_connection((name, port), timeout=HANDSHAKE_TIMEOUT) as sock,
            context.wrap_socket(sock, server_hostname=name),
        ):
            return True
    except ssl.SSLCertVerificationError:
        return True
    except ssl.SSLError:
        return False
    except TimeoutError:  # something listens and says nothing back to a ClientHello
        return False
    except OSError:
        return None


def verification_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure inside `exc` (a requests error wraps urllib3's, which
    wraps ssl's), or None when it is another error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        args = [a for a in getattr(current, "args", ()) if isinstance(a, BaseException)]
        reason = getattr(current, "reason", None)
        current = reason if isinstance(reason, BaseException) else args[0] if args else current.__cause__
    return None


_DAEMON_INFO: dict[str, Mapping] = {}  # DOCKER_HOST -> its `docker info`, asked once per process


def daemon_insecure(host: str, docker_env: Mapping[str, str]) -> bool:
    """Whether the Docker daemon (at DOCKER_HOST of `docker_env`) treats `host` as an insecure
    registry; False when no daemon answers (then only loopback is)."""
    key = docker_env.get("DOCKER_HOST", "")
    if key not in _DAEMON_INFO:
        import docker

        try:
            client = docker.from_env(timeout=15, environment=dict(docker_env))
            try:
                _DAEMON_INFO[key] = client.info()
            finally:
                client.close()
        except Exception:  # no daemon, or one that does not answer: nothing is insecure but loopback
            _DAEMON_INFO[key] = {}
    return insecure_in(_DAEMON_INFO[key], host)
