"""DSSE envelopes of in-toto Statements: signed with a key, keyless, or unsigned; and checked.

A key is a PKCS#8 PEM ECDSA P-256 private key (`openssl genpkey -algorithm EC -pkeyopt
ec_paramgen_curve:P-256`); securesystemslib's CryptoSigner signs each envelope's pre-authentication
encoding with it (ECDSA over SHA-256, an ASN.1 DER signature), which is what cosign verifies with
the matching public key. The signature's `keyid` is empty, as cosign writes it: cosign skips a
signature whose keyid names another key than its own fingerprint of the public key.

Keyless signing (keyless.py) gets a short-lived certificate for the workflow's OIDC identity from
sigstore's Fulcio and logs the signature in Rekor. Without a key the statements are still
attached, in envelopes with no signature, marked unsigned.

The private key lives only in the `KeySigner` (its repr hides it); it never reaches messages,
reports or the evidence itself. Only the public key's fingerprint is shown.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_release.errors import UsageError

if TYPE_CHECKING:
    from securesystemslib.signer import CryptoSigner, SSlibKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
MODES = ("key", "keyless")  # the `signing` setting; `key` without a signing_key: unsigned
NEW_KEY = (
    "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out signing-key.pem && "
    "openssl pkey -in signing-key.pem -pubout -out cosign.pub"
)


@dataclass(frozen=True)
class Signed:
    """One statement in its envelope, and what a registry layer of it is annotated with."""

    envelope: dict
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def body(self) -> bytes:
        return json.dumps(self.envelope, separators=(",", ":")).encode()


def fingerprint(public_key: Any) -> str:
    """sha256 of the public key's DER SubjectPublicKeyInfo: how the summary and reports name a key
    (`openssl pkey -pubin -in cosign.pub -outform DER | sha256sum` gives the same hex)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    der = public_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _cosign_key(public_key: Any) -> SSlibKey:
    """The securesystemslib key of `public_key`, with the empty keyid cosign's envelopes carry."""
    from securesystemslib.signer import SSlibKey

    found = SSlibKey.from_crypto(public_key)
    return SSlibKey("", found.keytype, found.scheme, found.keyval)


def _p256(key: Any) -> bool:
    from cryptography.hazmat.primitives.asymmetric import ec

    return isinstance(getattr(key, "curve", None), ec.SECP256R1)


@dataclass(frozen=True)
class KeySigner:
    path: str
    fingerprint: str
    signer: CryptoSigner = field(repr=False, compare=False)

    def sign(self, payload: bytes) -> Signed:
        from securesystemslib.dsse import Envelope

        envelope = Envelope(payload, PAYLOAD_TYPE, {})
        envelope.sign(self.signer)
        return Signed(envelope.to_dict())


def load_signing_key(path: str | Path, where: str = "--signing-key") -> KeySigner:
    """The PKCS#8 PEM ECDSA P-256 key in `path`; refused (exit 2) naming the file and the fix, never
    showing what the file holds."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(
            f"{where} {path}: cannot read the signing key ({exc.strerror}). Give the path of a "
            f"PKCS#8 PEM ECDSA P-256 private key."
        ) from None
    if b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem or b"ENCRYPTED SIGSTORE PRIVATE KEY" in pem:
        raise UsageError(
            f"{where} {path}: the signing key is encrypted; give it unencrypted (keep it in a "
            "secret instead): `openssl pkcs8 -topk8 -nocrypt -in KEY -out signing-key.pem`."
        )
    if b"-----BEGIN PRIVATE KEY-----" not in pem:
        raise UsageError(
            f"{where} {path}: not a PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----). Convert "
            f"it with `openssl pkcs8 -topk8 -nocrypt -in KEY -out signing-key.pem`, or make one: "
            f"{NEW_KEY}."
        )
    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise UsageError(
            f"{where} {path}: the PEM private key cannot be read (damaged, or encrypted). Make a new one: {NEW_KEY}."
        ) from None
    if not _p256(key):
        raise UsageError(f"{where} {path}: the signing key is not an ECDSA P-256 key; make one: {NEW_KEY}.")
    from securesystemslib.signer import CryptoSigner

    return KeySigner(str(path), fingerprint(key.public_key()), CryptoSigner(key, _cosign_key(key.public_key())))


@dataclass(frozen=True)
class PublicKey:
    path: str
    fingerprint: str
    key: Any = field(repr=False, compare=False)  # cryptography's EllipticCurvePublicKey


def load_public_key(path: str | Path, where: str = "--key") -> PublicKey:
    """The PEM public key (cosign.pub: -----BEGIN PUBLIC KEY-----) in `path`."""
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{where} {path}: cannot read the public key ({exc.strerror}).") from None
    if b"PRIVATE KEY" in pem:
        raise UsageError(
            f"{where} {path} holds a private key; give the public one (`openssl pkey -in KEY "
            "-pubout -out cosign.pub`), and keep the private key out of verification."
        )
    try:
        key = load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise UsageError(
            f"{where} {path}: not a PEM public key (-----BEGIN PUBLIC KEY-----); make it from the "
            "signing key with `openssl pkey -in signing-key.pem -pubout -out cosign.pub`."
        ) from None
    if not _p256(key):
        raise UsageError(f"{where} {path}: not an ECDSA P-256 public key, which release evidence is signed with.")
    return PublicKey(str(path), fingerprint(key), key)


class Signing:
    """How a run signs its statements: with a key, keyless, or not at all."""

    def __init__(self, mode: str, key: KeySigner | None = None, keyless: Any = None) -> None:
        self.mode = mode  # key | keyless | none
        self.key = key
        self.keyless = keyless  # keyless.KeylessSigner

    def __repr__(self) -> str:
        return f"Signing({self.mode}{', ' + self.key.fingerprint if self.key else ''})"

    @property
    def signed(self) -> bool:
        return self.mode != "none"

    @property
    def identity(self) -> str:
        """Who signs, for people: the key's fingerprint, the keyless identity, or "unsigned"."""
        if self.key is not None:
            return f"key {self.key.fingerprint}"
        if self.keyless is not None:
            return "keyless (sigstore, the workflow's OIDC identity)"
        return "unsigned"

    def sign(self, payload: bytes) -> Signed:
        if self.key is not None:
            return self.key.sign(payload)
        if self.keyless is not None:
            return Signed(*self.keyless.sign(payload))
        return Signed({"payload": base64.b64encode(payload).decode(), "payloadType": PAYLOAD_TYPE, "signatures": []})


def prepare(mode: str, signing_key: str | None, *, token_offered: bool = False) -> Signing:
    """The run's signing, checked before its first side effect: the key read and checked, or the
    keyless prerequisites (sigstore installed, an OIDC token on offer: `token_offered`) present."""
    if mode not in MODES:
        raise UsageError(f"signing {mode!r}: give key (sign with signing_key, when given) or keyless.")
    if mode == "keyless":
        if signing_key:
            raise UsageError(
                "signing keyless signs without a key: leave signing_key (signing-key) empty, or give signing: key."
            )
        from triton_release.evidence.keyless import KeylessSigner

        return Signing("keyless", keyless=KeylessSigner.prepare(token_offered))
    if signing_key:
        return Signing("key", key=load_signing_key(signing_key))
    return Signing("none")


def statement_of(envelope: object) -> tuple[dict | None, str]:
    """The in-toto Statement an envelope carries, or (None, what is wrong)."""
    if not isinstance(envelope, dict):
        return None, "the layer is not a DSSE envelope (a JSON object)"
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        return None, f"its payloadType is {envelope.get('payloadType')!r}, not {PAYLOAD_TYPE}"
    try:
        statement = json.loads(base64.b64decode(str(envelope.get("payload", "")), validate=True))
    except ValueError:  # also binascii.Error and UnicodeDecodeError
        return None, "its payload is not base64 of a JSON in-toto Statement"
    if not isinstance(statement, dict):
        return None, "its payload is not a JSON object"
    return statement, ""


def signature_problem(envelope: dict, key: PublicKey) -> str:
    """'' when one of the envelope's signatures verifies with `key`; else what is wrong: unsigned,
    or signed but not by this key."""
    from securesystemslib import exceptions
    from securesystemslib.dsse import Envelope

    signatures = envelope.get("signatures") or []
    if not signatures:
        return "unsigned (the release was made without a signing key)"
    for signature in signatures if isinstance(signatures, list) else []:
        # each alone, compared by the key itself: cosign's envelopes may leave keyid out or empty
        one = {
            "payload": envelope.get("payload"),
            "payloadType": envelope.get("payloadType"),
            "signatures": [{"keyid": "", "sig": signature.get("sig") if isinstance(signature, dict) else None}],
        }
        try:
            Envelope.from_dict(one).verify([_cosign_key(key.key)], 1)
            return ""
        except (exceptions.VerificationError, exceptions.FormatError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return f"its signature does not verify with the key {key.path} ({key.fingerprint})"
