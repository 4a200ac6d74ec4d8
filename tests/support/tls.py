"""A private CA as a team makes one, and what it issues: a registry's TLS certificate and a token
service's signing key (with the certificate a registry's `rootcertbundle` holds); the system
trust store a test controls (OpenSSL's SSL_CERT_FILE, which truststore reads on Linux); and the
environment a runner has (no REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE and the like)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # Debian's, as update-ca-certificates writes it
# Variables that point TLS clients at a bundle: these machines set them, a runner does not.
CA_VARIABLES = (
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NIX_SSL_CERT_FILE",
    "AWS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
)


def _name(common_name: str, organization: str = "Example Team") -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files in a folder."""

    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.cert), str(self.key))
        return context


class PrivateCA:
    """A CA made in `folder` (ca.crt, ca.key): it issues server certificates."""

    def __init__(self, folder: Path, name: str = "Example Team Private CA") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = _pem(self.certificate)
        self.cert = folder / "ca.crt"
        self.cert.write_text(self.pem)

    def issue(self, name: str, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), client: bool = False) -> Issued:
        """A server certificate for `hosts` (IP addresses and DNS names), or with `client` a client
        certificate, in `folder`/NAME.crt and .key."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(hosts[0]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        issued = Issued(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        issued.cert.write_text(_pem(certificate))
        issued.key.write_text(_key_pem(key))
        issued.key.chmod(0o600)
        return issued

    def system_store(self, folder: Path) -> Path:
        """The system store as an admin leaves it after copying this CA to
        /usr/local/share/ca-certificates/ and running update-ca-certificates: Debian's bundle plus
        this CA, in `folder`/ca-certificates.crt (give it as SSL_CERT_FILE)."""
        folder.mkdir(parents=True, exist_ok=True)
        bundle = folder / "ca-certificates.crt"
        bundle.write_text(SYSTEM_BUNDLE.read_text() + "\n" + self.pem)
        return bundle

    def certs_d(self, root: Path, host: str) -> Path:
        """A Docker certs.d folder (`root`) holding this CA for `host` (HOST:PORT/ca.crt): the root."""
        folder = root / host
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "ca.crt").write_text(self.pem)
        return root


def runner_env(**extra: str) -> dict[str, str]:
    """This process's environment without the CA bundle variables (a runner sets none), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in CA_VARIABLES}
    env.update(extra)
    return env


@dataclass(frozen=True)
class SigningKey:
    """A token service's RS256 key: its PEM, the self-signed certificate a registry's
    rootcertbundle holds, and its libtrust key id (the JWT header's `kid`)."""

    key: rsa.RSAPrivateKey
    certificate: Path
    kid: str

    @classmethod
    def made(cls, folder: Path, issuer: str) -> SigningKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(issuer))
            .issuer_name(_name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256())
        )
        path = folder / "token-signing.crt"
        path.write_text(_pem(certificate))
        return cls(key, path, libtrust_key_id(key.public_key()))

    @property
    def pem(self) -> bytes:
        return _key_pem(self.key).encode()


def libtrust_key_id(public_key) -> str:
    """docker/libtrust's key id: SHA-256 of the DER SubjectPublicKeyInfo, its first 30 bytes in
    base32, as twelve groups of four joined by ':' (what the distribution registry matches `kid` to)."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    encoded = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(encoded[i : i + 4] for i in range(0, 48, 4))
