"""Every knob of a proxy, in one frozen dataclass (names after Pulsar's ``proxy.conf``).

Why: the ``magnetar proxy`` command and the tests build the same object; the proxy reads
nothing else. Its security -- TLS listeners, client authentication, the proxy's own
credentials and TLS towards the brokers -- is the broker's :class:`SecurityConfig` (the same
``tls*``, ``authentication*``, ``token*`` and ``brokerClient*`` keys), plus the keys only a
proxy has (``tlsEnabledWithBroker``, ``forwardAuthorizationCredentials``,
``brokerServiceURLTLS``); docs/security.md, "The proxy".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.common import grpctls
from magnetar.security.config import SecurityConfig
from magnetar.wire import frames


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    bind_address: str = "0.0.0.0"
    port: int | None = 6650
    """Pulsar binary protocol port clients connect to (``servicePort``; None: off)."""
    http_port: int | None = 8080
    """Admin REST API forwarded to the brokers (``webServicePort``; None: off)."""
    tls_port: int | None = None
    """``pulsar+ssl`` port (``servicePortTls``)."""
    https_port: int | None = None
    """HTTPS admin port (``webServicePortTls``)."""
    metadata_url: str | None = None
    """Discover the live brokers in the metadata store (``metadataStoreUrl``)."""
    metadata_tls: grpctls.ClientTlsConfig | None = None
    """TLS to etcd (``metadataStoreConfigPath``, as the broker's)."""
    broker_service_url: str | None = None
    """Or one fixed broker address (``brokerServiceURL``, e.g. a Kubernetes Service)."""
    broker_web_service_url: str | None = None
    """The admin address that goes with ``broker_service_url`` (``brokerWebServiceURL``)."""
    broker_service_url_tls: str | None = None
    """The fixed address over TLS (``brokerServiceURLTLS``, with ``tlsEnabledWithBroker``)."""
    broker_web_service_url_tls: str | None = None
    """Its HTTPS admin address (``brokerWebServiceURLTLS``)."""
    tls_enabled_with_broker: bool = False
    """``tlsEnabledWithBroker``: reach the brokers on their pulsar+ssl and HTTPS URLs."""
    forward_authorization_credentials: bool = False
    """``forwardAuthorizationCredentials``: pass the client's own credentials to the broker
    (``original_auth_data``) beside its role."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    """Listeners' TLS, client authentication, the proxy's credentials towards brokers."""
    max_message_size: int = frames.DEFAULT_MAX_MESSAGE_SIZE
    """Announced on lookup connections; also bounds the CONNECT frame read before piping."""
    request_timeout_s: float = 30.0
    """How long a lookup or admin request forwarded to a broker may take."""
    max_redirects: int = 5
    """Lookup and admin redirects followed before the proxy gives up."""
    max_concurrent_inbound_connections: int = 10000
    """``maxConcurrentInboundConnections``: client connections open at once; one more is
    answered NotAllowedError and closed (counted in ``pulsar_proxy_rejected_connections``).
    0: no limit."""
    max_concurrent_inbound_connections_per_ip: int = 0
    """``maxConcurrentInboundConnectionsPerIp``: the same per client address (0: no limit)."""

    def __post_init__(self) -> None:
        if not self.metadata_url and not self.broker_service_url:
            raise ValueError("a proxy needs --metadata-url or --broker-service-url")
        if self.broker_service_url and not self.broker_web_service_url:
            raise ValueError("--broker-service-url needs --broker-web-service-url")
        if self.broker_service_url and not self.broker_service_url.startswith("pulsar://"):
            raise ValueError(f"broker service URL {self.broker_service_url!r}: expected pulsar://")
        if self.max_concurrent_inbound_connections < 0:
            raise ValueError("maxConcurrentInboundConnections must be >= 0 (0: no limit)")
        if self.max_concurrent_inbound_connections_per_ip < 0:
            raise ValueError("maxConcurrentInboundConnectionsPerIp must be >= 0 (0: no limit)")
        if self.port is None and self.tls_port is None:
            raise ValueError("servicePort and servicePortTls are both off: no binary listener")
        if self.broker_service_url and self.tls_enabled_with_broker:
            tls_url, web_tls = self.broker_service_url_tls, self.broker_web_service_url_tls
            if not tls_url or not tls_url.startswith("pulsar+ssl://"):
                raise ValueError(
                    "tlsEnabledWithBroker=true with brokerServiceURL needs brokerServiceURLTLS "
                    "(pulsar+ssl://host:port)"
                )
            if not web_tls or not web_tls.startswith("https://"):
                raise ValueError(
                    "tlsEnabledWithBroker=true with brokerWebServiceURL needs "
                    "brokerWebServiceURLTLS (https://host:port)"
                )
        tls = self.security.tls
        if (self.tls_port is not None or self.https_port is not None) and not (
            tls.certificate and tls.key
        ):
            raise ValueError(
                "servicePortTls / webServicePortTls need tlsCertificateFilePath and tlsKeyFilePath"
            )
