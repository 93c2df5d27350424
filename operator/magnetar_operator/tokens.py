"""Token signing keys and the super-user tokens the operator mints for a PulsarCluster.

Why: ``spec.auth`` turns token authentication and authorization on; the operator needs a
signing key (a Secret the user names, or one it generates, as ``pulsar tokens
create-secret-key`` would) and tokens for the roles it, the brokers (broker-to-broker
calls) and later the proxy act as. Pure functions over the Secret's bytes (PyJWT), so they
are unit-tested without a cluster. The key forms are Pulsar's: ``secret.key`` is the raw
HMAC secret (HS256), or ``private.key`` / ``public.key`` a key pair (DER or PEM; RSA signs
RS256, EC signs ES256).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

SECRET_KEY = "secret.key"  # noqa: S105  (a key name in a Secret)
PRIVATE_KEY = "private.key"
PUBLIC_KEY = "public.key"


@dataclass(frozen=True)
class Verification:
    """How brokers verify tokens: the signing Secret's key they mount (``item``) and a
    digest of its content, which the brokers' pod template carries, so that replacing the
    key restarts them with it (a broker reads its key at startup)."""

    item: str = SECRET_KEY
    digest: str = ""


NO_VERIFICATION = Verification()


@dataclass(frozen=True)
class SigningKey:
    """What signs tokens (``signing``) and what brokers verify them with (``verify_key``,
    the Secret's key name the broker's tokenSecretKey/tokenPublicKey points at)."""

    algorithm: str
    signing: bytes | rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    verifying: bytes | rsa.RSAPublicKey | ec.EllipticCurvePublicKey
    verify_key: str

    @property
    def verification(self) -> Verification:
        if isinstance(self.verifying, bytes):
            blob = self.verifying
        else:
            blob = self.verifying.public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        return Verification(self.verify_key, hashlib.sha256(blob).hexdigest()[:16])


def generate_secret_key() -> dict[str, bytes]:
    """A new HS256 secret, as ``magnetar tokens create-secret-key`` writes it (32 raw bytes)."""
    return {SECRET_KEY: secrets.token_bytes(32)}


def _load_private(data: bytes) -> rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey:
    loader = (
        serialization.load_pem_private_key
        if data.lstrip().startswith(b"-----")
        else serialization.load_der_private_key
    )
    key = loader(data, password=None)
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError(f"{PRIVATE_KEY}: an RSA or EC key is required")
    return key


def signing_key(data: Mapping[str, bytes]) -> SigningKey:
    """The signing key held by a Secret's data (``secret.key``, or ``private.key`` with
    ``public.key``). ValueError names what is wrong."""
    if data.get(SECRET_KEY):
        raw = data[SECRET_KEY]
        return SigningKey("HS256", raw, raw, SECRET_KEY)
    if data.get(PRIVATE_KEY) and data.get(PUBLIC_KEY):
        private = _load_private(data[PRIVATE_KEY])
        alg = "RS256" if isinstance(private, rsa.RSAPrivateKey) else "ES256"
        public = private.public_key()
        return SigningKey(alg, private, public, PUBLIC_KEY)
    raise ValueError(
        f"the Secret holds neither {SECRET_KEY!r} nor {PRIVATE_KEY!r} with {PUBLIC_KEY!r}"
    )


def mint(key: SigningKey, subject: str) -> str:
    """A token for role ``subject`` with no expiry (a service's own credential: it is
    replaced when the signing key changes)."""
    return jwt.encode({"sub": subject}, key.signing, algorithm=key.algorithm)


def valid_for(token: str, key: SigningKey, subject: str) -> bool:
    """Whether ``token`` verifies with ``key`` and names ``subject``."""
    try:
        claims = jwt.decode(token, key.verifying, algorithms=[key.algorithm])
    except jwt.PyJWTError:
        return False
    return claims.get("sub") == subject
