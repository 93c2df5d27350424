"""The proxy's security decisions without sockets: who a CONNECT is, the CONNECT the proxy
sends a broker for a piped client, the headers of a forwarded admin request, the brokers a
client may be piped to, and proxy.conf's security keys."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from magnetar import cli
from magnetar.proxy.access import ORIGINAL_PRINCIPAL_HEADER, ProxyAccess
from magnetar.proxy.brokers import BrokerLinks, Brokers
from magnetar.proxy.config import ProxyConfig
from magnetar.security import tokens
from magnetar.security.authn import AuthenticationError
from magnetar.security.config import SecurityConfig
from magnetar.security.tls import TlsSettings
from magnetar.wire import commands, pb, session

KEY = tokens.create_secret_key()
FIXED = {
    "broker_service_url": "pulsar://broker:6650",
    "broker_web_service_url": "http://broker:8080",
}


def _access(*, credentials: bool = True, forward: bool = False, **security: object) -> ProxyAccess:
    plugin = {"broker_client_auth_plugin": "token", "broker_client_auth_params": "token:proxy-jwt"}
    sec = SecurityConfig(
        authentication_enabled=True,
        providers=("token", "tls"),
        token_secret_key="data:;base64," + __import__("base64").b64encode(KEY).decode(),
        **(plugin if credentials else {}),
        **security,  # type: ignore[arg-type]
    )
    return ProxyAccess(
        ProxyConfig(**FIXED, security=sec, forward_authorization_credentials=forward)
    )


def _client_connect(token: str | None) -> pb.CommandConnect:
    cmd = commands.connect(
        client_version="Pulsar-CPP-v4.2.0",
        protocol_version=20,
        auth_method_name="token" if token else "none",
        auth_data=token.encode() if token else None,
        feature_flags=pb.FeatureFlags(supports_auth_refresh=True),
    ).connect
    cmd.proxy_to_broker_url = "pulsar://broker-1:6650"
    cmd.original_principal = "forged-by-the-client"
    return cmd


def test_the_broker_connect_names_the_client_with_the_proxys_credentials() -> None:
    access = _access()
    connect = _client_connect(tokens.create(subject="app", key=KEY))
    client = access.authenticate(connect, peer_cn=None)
    assert client.identity is not None and client.identity.role == "app"
    out = access.broker_connect(connect, client).connect
    assert (out.auth_method_name, out.auth_data) == ("token", b"proxy-jwt")
    assert out.original_principal == "app"
    assert not out.HasField("original_auth_data"), "forwardAuthorizationCredentials is off"
    assert not out.HasField("proxy_to_broker_url")
    assert (out.client_version, out.protocol_version) == ("Pulsar-CPP-v4.2.0", 20)
    assert not out.feature_flags.supports_auth_refresh


def test_forwarded_credentials_and_tls_roles() -> None:
    access = _access(forward=True)
    token = tokens.create(subject="app", key=KEY)
    connect = _client_connect(token)
    client = access.authenticate(connect, peer_cn=None)
    out = access.broker_connect(connect, client).connect
    assert (out.original_auth_method, out.original_auth_data) == ("token", token)
    tls_connect = commands.connect(auth_method_name="tls").connect
    assert access.authenticate(tls_connect, peer_cn="tls-app").who == session.OnBehalfOf(
        "tls-app", auth_method="tls", auth_data=b""
    )


def test_refusals_and_no_authentication() -> None:
    access = _access()
    with pytest.raises(AuthenticationError):
        access.authenticate(_client_connect(None), peer_cn=None)  # no anonymousUserRole
    with pytest.raises(AuthenticationError):
        access.authenticate(_client_connect("not-a-jwt"), peer_cn=None)
    open_proxy = ProxyAccess(ProxyConfig(**FIXED))
    assert not open_proxy.speaks_for_clients
    assert open_proxy.authenticate(_client_connect(None), peer_cn=None).who is None


def test_forwarded_admin_headers() -> None:
    access = _access()
    identity = access.authenticate_http(
        {"Authorization": f"Bearer {tokens.create(subject='app', key=KEY)}"}, peer_cn=None
    )
    headers = {"Authorization": "Bearer client", "x-original-principal": "forged", "Accept": "*/*"}
    access.forwarded_headers(headers, identity)
    assert headers == {
        "Accept": "*/*",
        ORIGINAL_PRINCIPAL_HEADER: "app",
        "Authorization": "Bearer proxy-jwt",
    }
    plain = ProxyAccess(ProxyConfig(**FIXED))
    untouched = {"Authorization": "Bearer client"}
    plain.forwarded_headers(untouched, None)
    assert untouched == {"Authorization": "Bearer client"}, "end-to-end credentials"


def test_config_refusals() -> None:
    with pytest.raises(ValueError, match="brokerServiceURLTLS"):
        ProxyConfig(**FIXED, tls_enabled_with_broker=True)
    with pytest.raises(ValueError, match="tlsCertificateFilePath"):
        ProxyConfig(**FIXED, tls_port=6651)
    with pytest.raises(ValueError, match="no binary listener"):
        ProxyConfig(**FIXED, port=None)
    cfg = ProxyConfig(
        **FIXED,
        port=None,
        tls_port=6651,
        security=SecurityConfig(tls=TlsSettings(certificate="c.pem", key="k.pem")),
    )
    assert cfg.tls_port == 6651


def test_brokers_resolve_only_known_brokers_on_the_transport_in_use() -> None:
    async def run() -> None:
        brokers = Brokers(
            service_url=FIXED["broker_service_url"],
            web_service_url=FIXED["broker_web_service_url"],
            service_url_tls="pulsar+ssl://broker:6651",
            web_service_url_tls="https://broker:8443",
        )
        assert await brokers.resolve("pulsar://broker:6650", tls=True) == "pulsar+ssl://broker:6651"
        assert (
            await brokers.resolve("pulsar+ssl://broker:6651", tls=False) == "pulsar://broker:6650"
        )
        assert await brokers.resolve("pulsar://elsewhere:6650", tls=True) is None
        brokers.learn("pulsar://b2:6650", "pulsar+ssl://b2:6651")
        assert await brokers.resolve("pulsar+ssl://b2:6651", tls=True) == "pulsar+ssl://b2:6651"
        assert await brokers.resolve("b2:6650", tls=False) == "pulsar://b2:6650"
        assert (await brokers.pick()).admin(tls=True) == "https://broker:8443"

    asyncio.run(run())


def test_links_are_shared_per_client_and_closed_with_the_last() -> None:
    links = BrokerLinks(max_frame_size=1 << 20, timeout=1.0)
    app = session.OnBehalfOf("app")
    links.acquire(app)
    links.acquire(app)
    links.release(app)
    assert app in links._pools
    links.release(app)
    assert app not in links._pools
    links.close()


def test_proxy_conf_security_keys(tmp_path: Path) -> None:
    conf = tmp_path / "proxy.conf"
    conf.write_text(
        "brokerServiceURL=pulsar://b:6650\nbrokerWebServiceURL=http://b:8080\n"
        "brokerServiceURLTLS=pulsar+ssl://b:6651\nbrokerWebServiceURLTLS=https://b:8443\n"
        "servicePort=\nwebServicePort=\nservicePortTls=6651\nwebServicePortTls=8443\n"
        "tlsCertificateFilePath=/c.pem\ntlsKeyFilePath=/k.pem\ntlsEnabledWithBroker=true\n"
        "authenticationEnabled=true\n"
        "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n"
        "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        "brokerClientAuthenticationParameters=token:abc\nforwardAuthorizationCredentials=true\n"
        "tlsEnabledInProxy=true\n"
    )
    args = cli.parse_args(["proxy", "--config", str(conf)])
    assert (args.port, args.http_port, args.tls_port, args.https_port) == (None, None, 6651, 8443)
    sec = cli.security_config(args)
    assert sec.providers == ("token",) and sec.broker_client_auth_params == "token:abc"
    assert args.tls_enabled_with_broker and args.forward_authorization_credentials
    for refused in ("authorizationEnabled=true\n", "proxyRoles=a\n", "brokerServicePortTls=1\n"):
        bad = tmp_path / "bad.conf"
        bad.write_text(refused)
        with pytest.raises(SystemExit):
            cli.parse_args(["proxy", "--config", str(bad)])
