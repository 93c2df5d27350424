"""Every knob of a proxy, in one frozen dataclass (names after Pulsar's ``proxy.conf``).

Why: the ``magnetar proxy`` command and the tests build the same object; the proxy reads
nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.wire import frames


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    bind_address: str = "0.0.0.0"
    port: int = 6650
    """Pulsar binary protocol port clients connect to (``servicePort``)."""
    http_port: int = 8080
    """Admin REST API forwarded to the brokers (``webServicePort``)."""
    metadata_url: str | None = None
    """Discover the live brokers in the metadata store (``metadataStoreUrl``)."""
    broker_service_url: str | None = None
    """Or one fixed broker address (``brokerServiceURL``, e.g. a Kubernetes Service)."""
    broker_web_service_url: str | None = None
    """The admin address that goes with ``broker_service_url`` (``brokerWebServiceURL``)."""
    max_message_size: int = frames.DEFAULT_MAX_MESSAGE_SIZE
    """Announced on lookup connections; also bounds the CONNECT frame read before piping."""
    request_timeout_s: float = 30.0
    """How long a lookup or admin request forwarded to a broker may take."""
    max_redirects: int = 5
    """Lookup and admin redirects followed before the proxy gives up."""

    def __post_init__(self) -> None:
        if not self.metadata_url and not self.broker_service_url:
            raise ValueError("a proxy needs --metadata-url or --broker-service-url")
        if self.broker_service_url and not self.broker_web_service_url:
            raise ValueError("--broker-service-url needs --broker-web-service-url")
        if self.broker_service_url and not self.broker_service_url.startswith("pulsar://"):
            raise ValueError(f"broker service URL {self.broker_service_url!r}: expected pulsar://")
