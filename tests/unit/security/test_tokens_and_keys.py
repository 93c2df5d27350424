"""Token keys and JWTs (magnetar.security.keys / tokens): every key form Pulsar's
configuration takes, signing and checking with secret keys and RSA/EC pairs, and the
refusals (forged, expired, ``alg: none``, an algorithm that does not fit the key, audience)."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import jwt
import pytest

from magnetar.security import keys, tokens


def test_key_forms(tmp_path: Path) -> None:
    raw = b"\x00\x01secret-bytes\xff"
    path = tmp_path / "k.bin"
    path.write_bytes(raw)
    b64 = base64.b64encode(raw).decode()
    for form in (
        f"file://{path}",
        str(path),
        f"data:;base64,{b64}",
        b64,
    ):
        assert keys.read(form, what="tokenSecretKey") == raw, form
    assert keys.read("data:,plain%20text", what="x") == b"plain text"
    with pytest.raises(keys.KeyMaterialError, match="tokenSecretKey: cannot read"):
        keys.read(f"file://{tmp_path / 'missing'}", what="tokenSecretKey")
    with pytest.raises(keys.KeyMaterialError, match="neither file://"):
        keys.read("not base64 at all!", what="tokenSecretKey")
    with pytest.raises(keys.KeyMaterialError, match="empty"):
        keys.read("  ", what="tokenSecretKey")


def test_secret_key_tokens_round_trip_and_refusals() -> None:
    secret = tokens.create_secret_key()
    assert len(secret) == 32
    validator = tokens.Validator(secret)
    token = tokens.create(subject="alice", key=secret, expires_in_s=60)
    role, expires = validator.validate(token)
    assert role == "alice" and expires is not None and expires > time.time()
    forged = tokens.create(subject="alice", key=tokens.create_secret_key())
    with pytest.raises(tokens.TokenError, match="invalid token"):
        validator.validate(forged)
    expired = tokens.create(subject="alice", key=secret, expires_in_s=-5)
    with pytest.raises(tokens.TokenError, match="expired"):
        validator.validate(expired)
    assert tokens.Validator(secret, leeway_s=60).validate(expired)[0] == "alice"
    unsigned = jwt.encode({"sub": "alice"}, None, algorithm="none")
    with pytest.raises(tokens.TokenError):
        validator.validate(unsigned)
    no_sub = jwt.encode({"role": "alice"}, secret, algorithm="HS256")
    with pytest.raises(tokens.TokenError, match="no 'sub' claim"):
        validator.validate(no_sub)
    assert tokens.Validator(secret, role_claim="role").validate(no_sub)[0] == "alice"
    with pytest.raises(tokens.TokenError):
        validator.validate("")


@pytest.mark.parametrize("algorithm", ["RS256", "ES256", "ES384", "PS256"])
def test_key_pairs_sign_and_check(algorithm: str) -> None:
    private_der, public_der = tokens.create_key_pair(algorithm)
    private = tokens.load_private_key(private_der)
    public = tokens.load_public_key(public_der)
    token = tokens.create(subject="bob", key=private, algorithm=algorithm)
    assert tokens.Validator(public).validate(token)[0] == "bob"
    # an HS256 token signed with the public key's bytes (the classic confusion) is refused
    confused = jwt.encode({"sub": "bob"}, b"x" * 32, algorithm="HS256")
    with pytest.raises(tokens.TokenError, match="algorithm"):
        tokens.Validator(public).validate(confused)


def test_pem_keys_are_read_too() -> None:
    from cryptography.hazmat.primitives import serialization

    private_der, _ = tokens.create_key_pair("RS256")
    private = tokens.load_private_key(private_der)
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    token = tokens.create(subject="carol", key=private)
    assert tokens.Validator(tokens.load_public_key(pem)).validate(token)[0] == "carol"
    with pytest.raises(ValueError, match="not a public key"):
        tokens.load_public_key(b"garbage")


def test_audience() -> None:
    secret = tokens.create_secret_key()
    validator = tokens.Validator(secret, audience_claim="aud", audience="pulsar")
    ok = tokens.create(subject="a", key=secret, claims={"aud": ["other", "pulsar"]})
    assert validator.validate(ok)[0] == "a"
    wrong = tokens.create(subject="a", key=secret, claims={"aud": "other"})
    with pytest.raises(tokens.TokenError, match="audience"):
        validator.validate(wrong)


def test_show_and_unknown_algorithms() -> None:
    secret = tokens.create_secret_key("HS512")
    assert len(secret) == 64
    token = tokens.create(subject="s", key=secret, algorithm="HS512", headers={"kid": "1"})
    header, claims = tokens.show(token)
    assert header["alg"] == "HS512" and header["kid"] == "1" and claims == {"sub": "s"}
    with pytest.raises(ValueError, match="unknown"):
        tokens.create_secret_key("HS999")
    with pytest.raises(tokens.TokenError, match="malformed"):
        tokens.show("nope")
