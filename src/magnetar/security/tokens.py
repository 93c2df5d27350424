"""JSON Web Tokens as Pulsar's token authentication uses them, through PyJWT.

Why this module exists: ``magnetar tokens`` (making keys and tokens), the broker's token
provider (validating them) and the tests share one set of rules, Pulsar's:

* a secret key (``tokenSecretKey``) signs and checks HS256/HS384/HS512 tokens; a key pair
  (``tokenPublicKey``) checks RS*/PS* tokens (RSA keys) or ES* tokens (EC keys), the private
  half signing them;
* keys are written as ``pulsar tokens`` writes them: the raw secret bytes, a PKCS#8 DER
  private key and an X.509 SubjectPublicKeyInfo DER public key (PEM is read too);
* the role is the ``tokenAuthClaim`` claim (``sub`` by default); ``exp`` is enforced (with
  ``tokenAllowedClockSkewSeconds``); with ``tokenAudienceClaim`` set, the token must name
  ``tokenAudience`` in it; ``alg: none`` and any algorithm that does not fit the key are
  refused.

No signature or claim check is written here: PyJWT does them.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

SECRET_ALGORITHMS: Final = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_ALGORITHMS: Final = ("ES256", "ES384", "ES512")
_SECRET_BYTES: Final = {"HS256": 32, "HS384": 48, "HS512": 64}
_EC_CURVES: Final[dict[str, type[ec.EllipticCurve]]] = {
    "ES256": ec.SECP256R1,
    "ES384": ec.SECP384R1,
    "ES512": ec.SECP521R1,
}

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


class TokenError(ValueError):
    """A token that does not authenticate; the message says why (shown to the client)."""


def create_secret_key(algorithm: str = "HS256") -> bytes:
    """A random secret key of the algorithm's size (``pulsar tokens create-secret-key``)."""
    if algorithm not in _SECRET_BYTES:
        raise ValueError(f"unknown secret-key algorithm {algorithm!r}: one of {SECRET_ALGORITHMS}")
    return secrets.token_bytes(_SECRET_BYTES[algorithm])


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """A new key pair as (PKCS#8 DER private key, X.509 DER public key)."""
    private: PrivateKey
    if algorithm in RSA_ALGORITHMS:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in _EC_CURVES:
        private = ec.generate_private_key(_EC_CURVES[algorithm]())
    else:
        raise ValueError(
            f"unknown key-pair algorithm {algorithm!r}: one of {RSA_ALGORITHMS + EC_ALGORITHMS}"
        )
    der_private = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    der_public = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return der_private, der_public


def load_private_key(data: bytes) -> PrivateKey:
    """A private key from DER (as ``pulsar tokens`` writes it) or PEM."""
    try:
        key = (
            serialization.load_pem_private_key(data, password=None)
            if data.lstrip().startswith(b"-----")
            else serialization.load_der_private_key(data, password=None)
        )
    except (ValueError, TypeError) as err:
        raise ValueError(f"not a private key (PKCS#8 DER or PEM): {err}") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError(f"unsupported private key type {type(key).__name__} (RSA or EC)")
    return key


def load_public_key(data: bytes) -> PublicKey:
    """A public key from X.509 DER (as ``pulsar tokens`` writes it) or PEM."""
    try:
        key = (
            serialization.load_pem_public_key(data)
            if data.lstrip().startswith(b"-----")
            else serialization.load_der_public_key(data)
        )
    except (ValueError, TypeError) as err:
        raise ValueError(f"not a public key (X.509 DER or PEM): {err}") from None
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise ValueError(f"unsupported public key type {type(key).__name__} (RSA or EC)")
    return key


def algorithms_for(key: bytes | PublicKey | PrivateKey) -> tuple[str, ...]:
    """The algorithms a key may sign or check."""
    if isinstance(key, bytes):
        return SECRET_ALGORITHMS
    if isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        return RSA_ALGORITHMS
    return EC_ALGORITHMS


def create(
    *,
    subject: str,
    key: bytes | PrivateKey,
    algorithm: str | None = None,
    expires_in_s: float | None = None,
    claims: dict[str, Any] | None = None,
    headers: dict[str, Any] | None = None,
) -> str:
    """A signed token whose ``sub`` is ``subject`` (``pulsar tokens create``)."""
    allowed = algorithms_for(key)
    alg = algorithm or ("HS256" if isinstance(key, bytes) else _default_private_alg(key))
    if alg not in allowed:
        raise ValueError(f"algorithm {alg} does not fit this key (one of {allowed})")
    payload: dict[str, Any] = {"sub": subject, **(claims or {})}
    if expires_in_s is not None:
        payload["exp"] = int(time.time() + expires_in_s)
    return jwt.encode(payload, key, algorithm=alg, headers=headers)


def _default_private_alg(key: PrivateKey) -> str:
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    return {256: "ES256", 384: "ES384", 521: "ES512"}.get(key.curve.key_size, "ES256")


def show(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, payload) of a token, unverified (``pulsar tokens show``)."""
    try:
        return jwt.get_unverified_header(token), jwt.decode(
            token, options={"verify_signature": False}
        )
    except jwt.PyJWTError as err:
        raise TokenError(f"malformed token: {err}") from None


@dataclass(frozen=True, slots=True)
class Validator:
    """Checks tokens with one key, as the broker's token provider is configured."""

    key: bytes | PublicKey
    role_claim: str = "sub"
    audience_claim: str | None = None
    audience: str | None = None
    leeway_s: float = 0.0

    def validate(self, token: str) -> tuple[str, float | None]:
        """(role, expiry as a Unix time or None) of a valid token; :class:`TokenError`
        naming the reason otherwise."""
        if not token:
            raise TokenError("empty token")
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=list(algorithms_for(self.key)),
                options={"verify_aud": False, "require": []},
                leeway=self.leeway_s,
            )
        except jwt.ExpiredSignatureError:
            raise TokenError("token has expired") from None
        except jwt.InvalidAlgorithmError as err:
            raise TokenError(f"token algorithm refused: {err}") from None
        except jwt.PyJWTError as err:
            raise TokenError(f"invalid token: {err}") from None
        if self.audience_claim:
            found = claims.get(self.audience_claim)
            names = found if isinstance(found, list) else [found]
            if self.audience is None or self.audience not in names:
                raise TokenError(
                    f"token's {self.audience_claim!r} claim does not include the audience "
                    f"{self.audience!r}"
                )
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise TokenError(f"token has no {self.role_claim!r} claim")
        exp = claims.get("exp")
        return role, float(exp) if isinstance(exp, int | float) else None
