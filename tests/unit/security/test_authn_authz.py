"""Authentication providers and authorization rules without a broker: htpasswd hashes as
Pulsar reads them, the anonymous role, HTTP headers, proxy roles and Pulsar's permission
rules; the admin routes' rules; client credentials in pulsar-admin's forms."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from passlib.hash import apr_md5_crypt, des_crypt

from magnetar.broker import access
from magnetar.security import authn, authz, tokens
from magnetar.security.client_auth import Credentials, CredentialsError
from magnetar.security.config import SecurityConfig

TopicOp = authz.TopicOp


def _authenticator(tmp_path: Path, *, anonymous: str | None = None) -> authn.Authenticator:
    secret = tmp_path / "secret.key"
    secret.write_bytes(tokens.create_secret_key())
    htpasswd = tmp_path / ".htpasswd"
    htpasswd.write_text(f"md5:{apr_md5_crypt.hash('pw1')}\ncrypt:{des_crypt.hash('pw2')}\n")
    config = SecurityConfig(
        authentication_enabled=True,
        providers=("tls", "token", "basic"),
        token_secret_key=f"file://{secret}",
        basic_auth_conf=str(htpasswd),
        anonymous_role=anonymous,
    )
    built = config.authenticator()
    assert built is not None
    return built


def test_basic_reads_both_hashes_pulsar_reads(tmp_path: Path) -> None:
    auth = _authenticator(tmp_path)
    assert auth.authenticate("basic", b"md5:pw1", peer_cn=None).role == "md5"
    assert auth.authenticate("basic", b"crypt:pw2", peer_cn=None).role == "crypt"
    for bad in (b"md5:nope", b"ghost:pw1", b"no-colon"):
        with pytest.raises(authn.AuthenticationError):
            auth.authenticate("basic", bad, peer_cn=None)


def test_tls_token_and_anonymous(tmp_path: Path) -> None:
    auth = _authenticator(tmp_path)
    assert auth.authenticate("tls", b"", peer_cn="client-a").role == "client-a"
    with pytest.raises(authn.AuthenticationError, match="certificate"):
        auth.authenticate("tls", b"", peer_cn=None)
    with pytest.raises(authn.AuthenticationError, match="Authentication required"):
        auth.authenticate("none", b"", peer_cn=None)
    with pytest.raises(authn.AuthenticationError, match="Unsupported authentication method"):
        auth.authenticate("kerberos", b"", peer_cn=None)
    anon = _authenticator(tmp_path, anonymous="anon")
    assert anon.authenticate("none", b"", peer_cn=None).role == "anon"
    assert anon.authenticate("kerberos", b"x", peer_cn=None).role == "anon"


def test_http_headers(tmp_path: Path) -> None:
    auth = _authenticator(tmp_path)
    basic = base64.b64encode(b"md5:pw1").decode()
    assert auth.authenticate_http(f"Basic {basic}", peer_cn=None).role == "md5"
    assert auth.authenticate_http(None, peer_cn="cert-role").role == "cert-role"
    with pytest.raises(authn.AuthenticationError):
        auth.authenticate_http("Bearer not-a-token", peer_cn=None)
    with pytest.raises(authn.AuthenticationError):
        auth.authenticate_http("Basic !!!", peer_cn=None)
    with pytest.raises(authn.AuthenticationError):
        auth.authenticate_http(None, peer_cn=None)


def test_misconfigured_providers_fail_at_startup() -> None:
    with pytest.raises(ValueError, match="tokenSecretKey or tokenPublicKey"):
        SecurityConfig(authentication_enabled=True, providers=("token",)).authenticator()
    with pytest.raises(ValueError, match="basicAuthConf"):
        SecurityConfig(authentication_enabled=True, providers=("basic",)).authenticator()
    assert SecurityConfig().authenticator() is None


AUTH = {
    "namespace_auth": {"ns-producer": ["produce"], "ns-both": ["produce", "consume"]},
    "destination_auth": {
        "persistent://t/ns/topic": {"topic-consumer": ["consume"]},
        "persistent://t/ns/parted": {"parted-producer": ["produce"]},
    },
    "subscription_auth_roles": {"restricted": ["ns-both"]},
}


@pytest.mark.parametrize(
    ("role", "op", "topic", "subscription", "allowed"),
    [
        ("ns-producer", TopicOp.PRODUCE, "persistent://t/ns/x", None, True),
        ("ns-producer", TopicOp.CONSUME, "persistent://t/ns/x", None, False),
        ("ns-producer", TopicOp.LOOKUP, "persistent://t/ns/x", None, True),
        ("topic-consumer", TopicOp.CONSUME, "persistent://t/ns/topic", None, True),
        ("topic-consumer", TopicOp.CONSUME, "persistent://t/ns/other", None, False),
        ("parted-producer", TopicOp.PRODUCE, "persistent://t/ns/parted-partition-3", None, True),
        ("ns-both", TopicOp.CONSUME, "persistent://t/ns/x", "restricted", True),
        ("topic-consumer", TopicOp.CONSUME, "persistent://t/ns/topic", "restricted", False),
        ("ns-both", TopicOp.ADMIN, "persistent://t/ns/x", None, False),
        ("admin-of-t", TopicOp.ADMIN, "persistent://t/ns/x", None, True),
        ("stranger", TopicOp.LOOKUP, "persistent://t/ns/x", None, False),
    ],
)
def test_pulsars_topic_rules(
    role: str, op: TopicOp, topic: str, subscription: str | None, allowed: bool
) -> None:
    from magnetar.wire.topics import TopicName

    name = TopicName.parse(topic)
    got = authz.topic_allowed(
        op,
        role=role,
        tenant_admins=["admin-of-t"],
        auth_policies=AUTH,
        topic=name.full_name,
        base_topic=name.base_name.full_name if name.is_partition else None,
        subscription=subscription,
    )
    assert got is allowed


def test_proxy_roles_act_for_the_original_principal() -> None:
    rules = authz.Rules(enabled=True, super_users=frozenset({"su"}), proxy_roles={"proxy"})  # type: ignore[arg-type]
    assert rules.acting_role("proxy", "alice") == "alice"
    assert rules.acting_role("proxy", None) is None
    assert rules.acting_role("bob", "alice") == "bob"
    assert rules.is_super_user("su") and not rules.is_super_user(None)
    with pytest.raises(ValueError, match="unknown action 'fly'"):
        authz.parse_actions(["produce", "fly"])
    assert authz.parse_actions(["consume", "consume", "produce"]) == ["consume", "produce"]


@pytest.mark.parametrize(
    ("method", "route", "need", "op"),
    [
        ("GET", "/admin/v2/clusters", access.Need.SUPER_USER, None),
        ("GET", "/admin/v2/tenants", access.Need.SUPER_USER, None),
        ("GET", "/admin/v2/tenants/{tenant}", access.Need.TENANT_ADMIN, None),
        ("DELETE", "/admin/v2/tenants/{tenant}", access.Need.TENANT_ADMIN, None),
        ("POST", "/admin/v2/tenants/{tenant}", access.Need.TENANT_ADMIN, None),
        ("PUT", "/admin/v2/tenants/{tenant}", access.Need.SUPER_USER, None),
        ("POST", "/admin/v3/functions/{tenant}/{namespace}/{name}", access.Need.TENANT_ADMIN, None),
        ("GET", "/admin/v3/functions/{tenant}/{namespace}", access.Need.TENANT_ADMIN, None),
        ("PUT", "/admin/v2/namespaces/{tenant}/{namespace}", access.Need.TENANT_ADMIN, None),
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}", access.Need.NAMESPACE, None),
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/stats", access.Need.TOPIC,
         TopicOp.LOOKUP),
        ("POST", "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/subscription/{subscription}"
         "/skip/{n}", access.Need.TOPIC, TopicOp.CONSUME),
        ("PUT", "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/unload", access.Need.TOPIC,
         TopicOp.ADMIN),
        ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", access.Need.TOPIC,
         TopicOp.LOOKUP),
        ("GET", "/admin/v2/some/new/route", access.Need.SUPER_USER, None),
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/examinemessage",
         access.Need.TOPIC, TopicOp.CONSUME),
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/ledger/{ledger}/entry/{entry}",
         access.Need.TOPIC, TopicOp.CONSUME),
        ("GET", "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitioned-internalStats",
         access.Need.TOPIC, TopicOp.LOOKUP),
        ("POST", "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/terminate/partitions",
         access.Need.TOPIC, TopicOp.ADMIN),
        ("POST", "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/maxProducers",
         access.Need.TOPIC, TopicOp.ADMIN),
        ("GET", "/admin/v3/transactions/coordinatorStats", access.Need.SUPER_USER, None),
        ("GET", "/admin/v2/broker-stats/topics", access.Need.SUPER_USER, None),
    ],
)  # fmt: skip
def test_route_rules(method: str, route: str, need: access.Need, op: TopicOp | None) -> None:
    rule = access.route_rule(method, route, authenticate_metrics=False)
    assert rule.need is need
    if op is not None:
        assert rule.op is op
    assert access.route_rule("GET", "/metrics", authenticate_metrics=False).need is (
        access.Need.NOTHING
    )
    assert access.route_rule("GET", "/metrics", authenticate_metrics=True).need is (
        access.Need.AUTHENTICATED
    )


def test_client_credentials_in_pulsar_admins_forms(tmp_path: Path) -> None:
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    assert Credentials.parse(plugin, "token:abc").http_headers() == {"Authorization": "Bearer abc"}
    assert Credentials.parse(plugin, '{"token": "abc"}').auth_data() == b"abc"
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    creds = Credentials.parse("token", f"file://{token_file}")
    assert creds.auth_data() == b"first"
    token_file.write_text("rotated\n")
    assert creds.auth_data() == b"rotated", "a token file is read at every use"
    basic = Credentials.parse(
        "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
        '{"userId": "u", "password": "p"}',
    )
    assert basic.http_headers() == {"Authorization": "Basic " + base64.b64encode(b"u:p").decode()}
    tls = Credentials.parse("tls", "tlsCertFile:/c.pem,tlsKeyFile:/k.pem")
    assert (tls.cert_file, tls.key_file, tls.http_headers()) == ("/c.pem", "/k.pem", {})
    for plugin_name, params, message in (
        ("com.example.Auth", "", "unsupported auth plugin"),
        ("token", "", "empty token"),
        ("basic", '{"userId": "u"}', "basic auth params"),
        ("tls", "tlsCertFile:/c.pem", "tls auth params"),
        ("token", "{broken", "malformed JSON"),
    ):
        with pytest.raises(CredentialsError, match=message):
            Credentials.parse(plugin_name, params)


def test_through_a_proxy_both_roles_are_checked() -> None:
    """Pulsar's AuthorizationService: a proxy role and its original principal must both be
    allowed; a proxy forwarding nothing, or forwarding a proxy role, is refused; an original
    principal from a role that is no proxy is not taken."""
    rules = authz.Rules(enabled=True, proxy_roles=frozenset({"proxy", "proxy2"}))
    assert rules.checked_roles("proxy", "alice") == ("proxy", "alice")
    assert rules.checked_roles("proxy", None) == ()
    assert rules.checked_roles("proxy", "proxy2") == ()
    assert rules.checked_roles("bob", "alice") == ("bob",)


def test_which_roles_may_name_an_original_principal() -> None:
    """Pulsar's isValidOriginalPrincipal: a broker with authorization on refuses CONNECT
    ("Invalid roles.") otherwise."""
    rules = authz.Rules(enabled=True, proxy_roles=frozenset({"proxy", "proxy2"}))
    assert rules.valid_original_principal("proxy", "alice")
    assert not rules.valid_original_principal("proxy", None)
    assert not rules.valid_original_principal("proxy", "proxy2")
    assert not rules.valid_original_principal("bob", "alice")
    assert rules.valid_original_principal("bob", None)
