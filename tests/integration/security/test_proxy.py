"""The proxy secured as Pulsar's proxy is: clients connect to its ``pulsar+ssl`` and HTTPS
listeners and authenticate there (token, TLS certificate, basic); the proxy reaches the
secured standalone over TLS as itself (role ``proxy``, in the broker's ``proxyRoles`` and
``superUserRoles``) and names each client as the original principal, which the broker
authorizes -- so a role without permission is refused through the proxy with
AuthorizationError, exactly as directly.

``MAGNETAR_SECURITY_AGAINST=pulsar`` runs the same tests against Apache Pulsar's proxy in
front of Apache Pulsar standalone, configured with the same proxy.conf (the checks of
docs/security.md, "The proxy")."""

from __future__ import annotations

import itertools
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.wire import commands, pb
from tests.integration.security.conftest import AGAINST, magnetar_only
from tests.support import roundtrip
from tests.support.procs import LOOPBACK, started
from tests.support.proxy import ProxyProc, PulsarProxyProc
from tests.support.raw_client import RawClient
from tests.support.secured import (
    BASIC_USERS,
    PROVIDERS,
    SUPER_USERS,
    Secured,
    SecuredBase,
    SecuredPulsar,
)
from tests.support.wait import wait_until

_names = itertools.count()
REFUSED_ON_CONNECT = (pulsar.Timeout, pulsar.ConnectError, pulsar.AuthenticationError)
"""What the official client raises when CONNECT is refused (it retries until the operation
timeout, as against Pulsar; see test_client_auth.py)."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBase]:
    base = tmp_path_factory.mktemp("proxied")
    conf = {
        "proxyRoles": "proxy,weak-proxy",
        "superUserRoles": ",".join((*SUPER_USERS, "proxy")),
    }
    target: SecuredBase = (
        SecuredPulsar(base, extra_conf=conf)
        if AGAINST == "pulsar"
        else Secured(base, extra_conf=conf)
    )
    with started(target) as proc:  # type: ignore[type-var]
        proc.set_up_like_the_client_tests()
        yield proc


def _proxy(broker: SecuredBase, base: Path, role: str) -> ProxyProc:
    """A proxy (Magnetar's, or Pulsar's against Pulsar) in front of ``broker``, acting as
    ``role`` towards it, from one proxy.conf."""
    conf = base / "proxy.conf"
    conf.write_text(
        "".join(
            f"{k}={v}\n"
            for k, v in {
                "brokerServiceURL": f"pulsar://localhost:{broker.port}",
                "brokerWebServiceURL": f"http://localhost:{broker.http_port}",
                "brokerServiceURLTLS": broker.tls_service_url,
                "brokerWebServiceURLTLS": broker.https_url,
                "tlsEnabledWithBroker": "true",
                "tlsHostnameVerificationEnabled": "true",
                "brokerClientTrustCertsFilePath": str(broker.ca.ca_file),
                "brokerClientAuthenticationPlugin": (
                    "org.apache.pulsar.client.impl.auth.AuthenticationToken"
                ),
                "brokerClientAuthenticationParameters": f"token:{broker.token(role)}",
                "tlsCertificateFilePath": str(broker.broker_cert.cert),
                "tlsKeyFilePath": str(broker.broker_cert.key),
                "tlsTrustCertsFilePath": str(broker.ca.ca_file),
                "tlsCertRefreshCheckDurationSec": "1",
                "authenticationEnabled": "true",
                "authenticationProviders": PROVIDERS,
                "tokenSecretKey": f"file://{broker.secret_key}",
                "basicAuthConf": f"file://{broker.base / '.htpasswd'}",
            }.items()
        )
    )
    tls = ssl.create_default_context(cafile=str(broker.ca.ca_file))
    if AGAINST == "pulsar":
        return PulsarProxyProc(base, conf=conf, tls=tls, basic_auth_conf=broker.base / ".htpasswd")
    return ProxyProc(base, args=["--config", str(conf)], tls=tls)


@pytest.fixture(scope="module")
def proxy(broker: SecuredBase, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProc]:
    """The proxy whose role is a super-user (what Pulsar's documentation recommends)."""
    with started(_proxy(broker, tmp_path_factory.mktemp("proxy"), "proxy")) as proc:
        yield proc


def _client(broker: SecuredBase, proxy: ProxyProc, **options: object) -> pulsar.Client:
    return pulsar.Client(
        proxy.tls_service_url,
        **{
            "tls_trust_certs_file_path": str(broker.ca.ca_file),
            "tls_validate_hostname": True,
            "operation_timeout_seconds": 10,
            **options,
        },
    )


def _roundtrip(client: pulsar.Client, namespace: str, n: int = 5) -> None:
    roundtrip.round_trip(client, f"persistent://{namespace}/p-{next(_names)}", n)


def test_token_through_the_proxy_over_tls(broker: SecuredBase, proxy: ProxyProc) -> None:
    client = _client(broker, proxy, authentication=pulsar.AuthenticationToken(
        broker.token("token-principal")
    ))  # fmt: skip
    try:
        _roundtrip(client, "private/auth")
    finally:
        client.close()


def test_tls_certificate_and_basic_through_the_proxy(
    broker: SecuredBase, proxy: ProxyProc, tmp_path: Path
) -> None:
    pair = broker.ca.issue("tls-principal", file_stem="tls-principal")
    client = _client(
        broker, proxy, authentication=pulsar.AuthenticationTLS(str(pair.cert), str(pair.key))
    )
    try:
        _roundtrip(client, "private/auth")
    finally:
        client.close()
    basic = pulsar.AuthenticationBasic("basic-user", BASIC_USERS["basic-user"])
    client = _client(broker, proxy, authentication=basic)
    try:
        _roundtrip(client, "private/auth", n=2)
    finally:
        client.close()


def test_refused_without_valid_credentials(broker: SecuredBase, proxy: ProxyProc) -> None:
    """No anonymousUserRole on the proxy: no credentials, a forged token and a wrong
    password are refused at the proxy (counted there)."""
    forged = pulsar.AuthenticationToken(broker.token("token-principal")[:-4] + "AAAA")
    wrong = pulsar.AuthenticationBasic("basic-user", "not-the-password")
    for auth in (None, forged, wrong):
        options = {"operation_timeout_seconds": 3}
        if auth is not None:
            options["authentication"] = auth  # type: ignore[assignment]
        client = _client(broker, proxy, **options)
        try:
            with pytest.raises(REFUSED_ON_CONNECT):
                client.create_producer(f"persistent://private/auth/r-{next(_names)}")
        finally:
            client.close()
    if AGAINST == "magnetar":
        metrics = proxy.metrics()
        found = re.findall(r"^pulsar_authentication_failures_total{.*} (\S+)$", metrics, re.M)
        assert sum(float(v) for v in found) >= 2


def test_a_role_without_permission_is_refused_through_the_proxy(
    broker: SecuredBase, proxy: ProxyProc
) -> None:
    """The proxy's own role is a super-user: the refusal shows the broker authorized the
    original principal the proxy forwarded, on the lookup and on produce and consume."""
    client = _client(broker, proxy, authentication=pulsar.AuthenticationToken(
        broker.token("nobody")
    ))  # fmt: skip
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(f"persistent://private/auth/n-{next(_names)}")
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(f"persistent://private/auth/n-{next(_names)}", "s")
    finally:
        client.close()
    # granted on the namespace, the same role gets through
    broker.admin(
        "namespaces", "grant-permission", "private/auth", "--actions", "produce", "--role", "nobody"
    )
    client = _client(broker, proxy, authentication=pulsar.AuthenticationToken(
        broker.token("nobody")
    ))  # fmt: skip
    try:
        producer = client.create_producer(f"persistent://private/auth/n-{next(_names)}")
        producer.send(b"now allowed")
        with pytest.raises(pulsar.AuthorizationError):  # produce only
            client.subscribe(f"persistent://private/auth/n-{next(_names)}", "s")
    finally:
        client.close()
        broker.admin("namespaces", "revoke-permission", "private/auth", "--role", "nobody")


def _https(proxy: ProxyProc, broker: SecuredBase, path: str, token: str | None) -> int:
    request = urllib.request.Request(proxy.https_url + path)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(broker.ca.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=10, context=ctx) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_admin_through_the_proxy_acts_for_the_client(broker: SecuredBase, proxy: ProxyProc) -> None:
    """The proxy authenticates the request and forwards it as itself with
    X-Original-Principal: the broker authorizes the client's role."""
    path = "/admin/v2/namespaces/private/auth/topics"
    assert _https(proxy, broker, path, broker.token("token-principal")) == 200
    nobody = broker.token("nobody")
    direct, _ = broker.https("GET", path, token=nobody)
    assert direct in (401, 403)
    assert _https(proxy, broker, path, nobody) == direct, "through the proxy as directly"
    assert _https(proxy, broker, path, None) == 401  # no anonymous role on the proxy
    assert _https(proxy, broker, "/admin/v2/tenants", broker.super_token) == 200


@magnetar_only("Magnetar counts refused TLS handshakes")
def test_plaintext_on_the_tls_port_is_refused_and_counted(proxy: ProxyProc) -> None:
    def refused() -> float:
        found = re.findall(
            r'^pulsar_tls_handshake_failures_total{listener="servicePortTls"} (\S+)$',
            proxy.metrics(),
            re.M,
        )
        return float(found[0]) if found else 0.0

    before = refused()
    with socket.create_connection((LOOPBACK, proxy.tls_port), timeout=5) as sock:
        sock.sendall(b"\x00\x00\x00\x10not a TLS hello at all")
        sock.settimeout(5)
        try:
            sock.recv(100)
        except OSError:
            pass
    wait_until(lambda: refused() > before, timeout=10)


def test_the_proxys_role_must_be_allowed_too(broker: SecuredBase, tmp_path: Path) -> None:
    """Pulsar's rule: through a proxy, the broker authorizes both the proxy's role and the
    original principal. A proxy role with no grant (and no super-user) gets its clients
    refused even where they are allowed, until it is granted too."""
    app = pulsar.AuthenticationToken(broker.token("token-principal"))
    with started(_proxy(broker, tmp_path, "weak-proxy")) as weak:
        client = _client(broker, weak, authentication=app)
        try:
            with pytest.raises(pulsar.AuthorizationError):
                client.create_producer(f"persistent://private/auth/w-{next(_names)}")
        finally:
            client.close()
        broker.admin(
            "namespaces", "grant-permission", "private/auth",
            "--actions", "produce,consume", "--role", "weak-proxy",
        )  # fmt: skip
        client = _client(broker, weak, authentication=app)
        try:
            _roundtrip(client, "private/auth", n=2)
        finally:
            client.close()
            broker.admin("namespaces", "revoke-permission", "private/auth", "--role", "weak-proxy")


def _connect_as(broker: SecuredBase, role: str, original: str | None) -> pb.BaseCommand:
    """The broker's answer to a CONNECT of ``role``'s token naming ``original``."""
    raw = RawClient(broker.port)
    try:
        cmd = commands.connect(
            client_version="raw-test",
            protocol_version=20,
            auth_method_name="token",
            auth_data=broker.token(role).encode(),
        )
        if original is not None:
            cmd.connect.original_principal = original
        raw.command(cmd)
        return raw.read(timeout=10).command
    finally:
        raw.close()


def test_who_may_name_an_original_principal(broker: SecuredBase) -> None:
    """As Pulsar's broker: only a proxy role may name one, it must, and not a proxy role;
    otherwise CONNECT is refused with AuthorizationError ("Invalid roles.")."""
    assert _connect_as(broker, "proxy", "token-principal").type == pb.BaseCommand.CONNECTED
    assert _connect_as(broker, "token-principal", None).type == pb.BaseCommand.CONNECTED
    for role, original in (
        ("token-principal", "superUser"),  # a client cannot pose as another role
        ("proxy", None),
        ("proxy", "weak-proxy"),
    ):
        answer = _connect_as(broker, role, original)
        assert answer.type == pb.BaseCommand.ERROR, (role, original)
        assert answer.error.error == pb.AuthorizationError, (role, original)
