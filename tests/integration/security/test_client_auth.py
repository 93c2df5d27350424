"""Acceptance 1 of the security issue, with the official Python client against a standalone
secured like the client's own test set-up: produce/consume over TLS (hostname verified),
TLS-certificate, token (and token supplier) and basic authentication, refusals (wrong
password, invalid / expired / unsigned tokens, a role without permission on produce and on
consume)."""

from __future__ import annotations

import itertools
import re

import pulsar
import pytest

from tests.support import roundtrip
from tests.support.secured import BASIC_USERS, Secured
from tests.support.wait import wait_until

_names = itertools.count()

REFUSED_ON_CONNECT = (pulsar.Timeout, pulsar.ConnectError, pulsar.AuthenticationError)
"""What the official client raises when the broker refuses its CONNECT: it answers
ERROR(AuthenticationError) and closes, which the C++ core treats as a lost connection and
retries until the operation times out -- as against Apache Pulsar (the client's own tests
expect Timeout / ConnectError). The refusal itself is asserted on the broker's counter."""


def _failures(secured: Secured, method: str) -> float:
    found = re.findall(
        rf'^pulsar_authentication_failures_total{{[^}}]*auth_method="{method}"[^}}]*}} (\S+)$',
        secured.metrics(),
        flags=re.M,
    )
    return sum(float(v) for v in found)


def _refused(secured: Secured, method: str, auth: pulsar.Authentication) -> None:
    before = _failures(secured, method)
    failed_before = _connections_failed(secured)
    client = secured.client(authentication=auth, operation_timeout_seconds=3)
    try:
        with pytest.raises(REFUSED_ON_CONNECT):
            client.create_producer(_topic("private/auth"))
    finally:
        client.close()
    assert _failures(secured, method) > before, f"no {method} authentication failure counted"
    # the refused connections are closed before CONNECTED (docs/metrics.md)
    wait_until(
        lambda: _connections_failed(secured) > failed_before,
        what="pulsar_connection_create_fail_count counting the refused connections",
    )


def _connections_failed(secured: Secured) -> float:
    found = re.findall(
        r"^pulsar_connection_create_fail_count{[^}]*} (\S+)$", secured.metrics(), flags=re.M
    )
    return sum(float(v) for v in found)


def _topic(namespace: str) -> str:
    return f"persistent://{namespace}/t-{next(_names)}"


def _roundtrip(client: pulsar.Client, topic: str, n: int = 5) -> None:
    roundtrip.round_trip(client, topic, n, subscription="sub")


def test_anonymous_produce_and_consume_over_tls_on_public_default(secured: Secured) -> None:
    client = secured.client()
    try:
        _roundtrip(client, _topic("public/default"))
    finally:
        client.close()


def test_anonymous_is_refused_on_private_auth(secured: Secured) -> None:
    client = secured.client()
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(_topic("private/auth"))
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(_topic("private/auth"), "sub")
    finally:
        client.close()


def test_tls_client_certificate_authentication(secured: Secured) -> None:
    pair = secured.ca.issue("tls-principal")
    client = secured.client(authentication=pulsar.AuthenticationTLS(str(pair.cert), str(pair.key)))
    try:
        _roundtrip(client, _topic("private/auth"))
    finally:
        client.close()


def test_token_authentication_and_a_token_supplier(secured: Secured) -> None:
    token = secured.token("token-principal")
    client = secured.client(authentication=pulsar.AuthenticationToken(token))
    try:
        _roundtrip(client, _topic("private/auth"))
    finally:
        client.close()
    calls = []

    def supplier() -> str:
        calls.append(1)
        return token

    client = secured.client(authentication=pulsar.AuthenticationToken(supplier))
    try:
        _roundtrip(client, _topic("private/auth"))
    finally:
        client.close()
    assert calls, "the supplier was never asked"


def test_basic_authentication_and_a_wrong_password(secured: Secured) -> None:
    client = secured.client(
        authentication=pulsar.AuthenticationBasic("basic-user", BASIC_USERS["basic-user"])
    )
    try:
        _roundtrip(client, _topic("private/auth"))
    finally:
        client.close()
    _refused(secured, "basic", pulsar.AuthenticationBasic("basic-user", "nope"))
    # through the HTTP lookup (the client's service URL is the admin URL), as the official
    # client's test_invalid_basic_auth does: 401 -> ConnectError
    client = pulsar.Client(
        secured.https_url,
        authentication=pulsar.AuthenticationBasic("invalid", "123456"),
        tls_trust_certs_file_path=str(secured.ca.ca_file),
        operation_timeout_seconds=5,
    )
    try:
        with pytest.raises(pulsar.ConnectError):
            client.subscribe(_topic("private/auth"), "sub")
    finally:
        client.close()


def test_an_unknown_method_is_the_anonymous_role(secured: Secured) -> None:
    """The client's test_basic_auth_method: credentials for a method no provider serves make
    the client anonymous, refused on private/auth as an authorization error."""
    client = secured.client(
        authentication=pulsar.AuthenticationBasic("admin", BASIC_USERS["admin"], "unknown")
    )
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(_topic("private/auth"))
    finally:
        client.close()


def test_the_http_lookup_with_a_token(secured: Secured) -> None:
    """The client's test_token_auth: the service URL is the admin URL (HTTP lookup)."""
    client = pulsar.Client(
        secured.https_url,
        authentication=pulsar.AuthenticationToken(secured.token("token-principal")),
        tls_trust_certs_file_path=str(secured.ca.ca_file),
        tls_validate_hostname=True,
        operation_timeout_seconds=10,
    )
    try:
        _roundtrip(client, _topic("private/auth"))
    finally:
        client.close()


@pytest.mark.parametrize("kind", ["forged", "expired", "unsigned", "garbage"])
def test_invalid_tokens_are_refused(secured: Secured, kind: str) -> None:
    import jwt

    token = {
        "forged": jwt.encode({"sub": "superUser"}, b"another-key-of-32-bytes-exactly!", "HS256"),
        "expired": secured.token("token-principal", expires_in_s=-60),
        "unsigned": jwt.encode({"sub": "superUser"}, None, algorithm="none"),
        "garbage": "not.a.token",
    }[kind]
    _refused(secured, "token", pulsar.AuthenticationToken(token))


def test_a_role_without_permission_is_refused_on_produce_and_on_consume(
    secured: Secured,
) -> None:
    client = secured.client(authentication=pulsar.AuthenticationToken(secured.token("nobody")))
    try:
        topic = _topic("private/auth")
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "sub")
    finally:
        client.close()


def test_a_topic_grant_allows_only_what_it_grants(secured: Secured) -> None:
    topic = _topic("private/auth")
    # Pulsar refuses a grant on a topic that does not exist (404): make it first
    assert "404" in secured.admin(
        "topics", "grant-permission", topic, "--role", "reader", "--actions", "consume",
        check=False,
    )  # fmt: skip
    secured.admin("topics", "create", topic)
    secured.admin("topics", "grant-permission", topic, "--role", "reader", "--actions", "consume")
    client = secured.client(authentication=pulsar.AuthenticationToken(secured.token("reader")))
    try:
        client.subscribe(topic, "sub").close()
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
    finally:
        client.close()
    secured.admin("topics", "revoke-permission", topic, "--role", "reader")
