"""Keyless signing with sigstore: the workflow's GitHub OIDC token buys a short-lived certificate
from Fulcio for its identity (the workflow file and ref), each envelope is signed with a key that
lives only for this run, and the signature goes into the Rekor transparency log.

It needs sigstore-python (the action's image has it; elsewhere `pip install sigstore`), a job
with `permissions: id-token: write` (GitHub then gives the step ACTIONS_ID_TOKEN_REQUEST_URL and
ACTIONS_ID_TOKEN_REQUEST_TOKEN), and the network to reach sigstore's public services. None of that
is on offer where this project is tested, so only the parts that need none of it are tested: the
prerequisites refused with the fix, and the layer annotations cosign reads made from a bundle.

Each layer carries what cosign's keyless attestations carry: the certificate
(`dev.sigstore.cosign/certificate`), the chain (`dev.sigstore.cosign/chain`) and the Rekor entry
(`dev.sigstore.cosign/bundle`), so that `cosign verify-attestation --certificate-identity ...
--certificate-oidc-issuer https://token.actions.githubusercontent.com` accepts it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from triton_release.errors import InfrastructureError, UsageError

CERTIFICATE = "dev.sigstore.cosign/certificate"
CHAIN = "dev.sigstore.cosign/chain"
BUNDLE = "dev.sigstore.cosign/bundle"
TOKEN_VARIABLES = ("ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")


def token_offered(env: Mapping[str, str]) -> bool:
    """Whether the job's environment offers GitHub's OIDC token (read at the door)."""
    return all(env.get(name) for name in TOKEN_VARIABLES)


def check_prerequisites(offered: bool, importable: bool) -> None:
    """Refused (exit 2) with the fix unless sigstore is installed and GitHub offers an OIDC token."""
    if not importable:
        raise UsageError(
            "signing keyless needs sigstore-python, which is not installed here: `pip install "
            "sigstore` (the action's image has it), or sign with a key (signing_key)."
        )
    if not offered:
        raise UsageError(
            "signing keyless needs the workflow's OIDC token, and this job has none: give the job "
            "`permissions: id-token: write` (and contents: read) in GitHub Actions, or sign with a "
            "key (signing_key). Keyless signing cannot run outside GitHub Actions."
        )


def rekor_bundle(entry: Any) -> dict:
    """cosign's `dev.sigstore.cosign/bundle` annotation (its RekorBundle) of a sigstore log entry:
    the signed entry timestamp and the entry's body, time, index and log id."""
    inner = entry._inner
    return {
        "SignedEntryTimestamp": _b64(inner.inclusion_promise.signed_entry_timestamp),
        "Payload": {
            "body": _b64(inner.canonicalized_body),
            "integratedTime": int(inner.integrated_time),
            "logIndex": int(inner.log_index),
            "logID": base64.b64decode(_b64(inner.log_id.key_id)).hex(),
        },
    }


def _b64(value: Any) -> str:
    """Bytes (raw) or text (base64 already), as base64 text."""
    return base64.b64encode(value).decode() if isinstance(value, (bytes, bytearray)) else str(value)


def cosign_annotations(bundle: Any) -> dict[str, str]:
    """The certificate, chain and Rekor entry of a sigstore bundle, as cosign annotates a layer."""
    from cryptography.hazmat.primitives.serialization import Encoding

    found = {
        CERTIFICATE: bundle.signing_certificate.public_bytes(Encoding.PEM).decode(),
        BUNDLE: json.dumps(rekor_bundle(bundle.log_entry), separators=(",", ":")),
    }
    chain = getattr(bundle, "chain_pem", "")
    if chain:
        found[CHAIN] = chain
    return found


class KeylessSigner:
    """Signs with sigstore's production instance, one Fulcio certificate for the whole run."""

    def __init__(self, context: Any, token: Any) -> None:
        self._context, self._token = context, token

    def __repr__(self) -> str:
        return "KeylessSigner(sigstore)"

    @classmethod
    def prepare(cls, offered: bool) -> KeylessSigner:
        """`offered`: the job offers GitHub's OIDC token (`token_offered`)."""
        try:
            import sigstore  # noqa: F401 - only whether it is there

            importable = True
        except ImportError:
            importable = False
        check_prerequisites(offered, importable)
        from sigstore.models import ClientTrustConfig
        from sigstore.oidc import IdentityToken, detect_credential
        from sigstore.sign import SigningContext

        try:
            raw = detect_credential()  # GitHub's token service, for the audience sigstore
            if not raw:
                raise UsageError(
                    "signing keyless: GitHub gave no OIDC token; give the job `permissions: id-token: write`."
                )
            context = SigningContext.from_trust_config(ClientTrustConfig.production())
            return cls(context, IdentityToken(raw))
        except UsageError:
            raise
        except Exception as exc:  # sigstore's own errors: its services or the token
            raise InfrastructureError(
                f"signing keyless: sigstore could not start ({exc.__class__.__name__}: "
                f"{exc}). Check that the runner reaches sigstore's services, or sign with "
                "a key."
            ) from None

    def sign(self, payload: bytes) -> tuple[dict, dict[str, str]]:
        """The DSSE envelope of `payload` and the annotations its registry layer carries (cosign's)."""
        from sigstore.dsse import Statement

        try:
            with self._context.signer(self._token, cache=True) as signer:
                bundle = signer.sign_dsse(Statement(payload))
        except Exception as exc:
            raise InfrastructureError(
                f"signing keyless failed ({exc.__class__.__name__}: {exc}); the release "
                "is published without its evidence: run again to attach it."
            ) from None
        envelope = json.loads(bundle._dsse_envelope.to_json())
        for signature in envelope.get("signatures", []):
            signature.setdefault("keyid", "")
        return envelope, cosign_annotations(bundle)
