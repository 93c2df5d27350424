"""Security counters, in Pulsar's names where Pulsar has them.

``pulsar_authentication_success_total`` / ``pulsar_authentication_failures_total`` are
Pulsar's AuthenticationMetrics (labels provider_name, auth_method, and reason on failures);
``pulsar_tls_handshake_failures_total`` counts connections refused before any command was
read (plaintext or garbage on a TLS port, an untrusted client certificate), by listener;
``pulsar_tls_certificate_expiration_timestamp_seconds{certificate}`` is when the serving
certificate (label: its file) expires, only in a process with TLS listeners (Magnetar's own,
for the certificate-expiry alert).
One registry per process, rendered on its /metrics.
"""

from __future__ import annotations

import prometheus_client

REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)

AUTH_SUCCESS = prometheus_client.Counter(
    "pulsar_authentication_success",
    "Successful authentications",
    ["provider_name", "auth_method"],
    registry=REGISTRY,
)
AUTH_FAILURES = prometheus_client.Counter(
    "pulsar_authentication_failures",
    "Failed authentications",
    ["provider_name", "auth_method", "reason"],
    registry=REGISTRY,
)
TLS_HANDSHAKE_FAILURES = prometheus_client.Counter(
    "pulsar_tls_handshake_failures",
    "TLS handshakes that failed (connection refused before any command)",
    ["listener"],
    registry=REGISTRY,
)
TLS_RELOADS = prometheus_client.Counter(
    "pulsar_tls_certificate_reloads",
    "Times a TLS listener re-read its certificate files after they changed",
    registry=REGISTRY,
)

TLS_CERT_EXPIRY = prometheus_client.Gauge(
    "pulsar_tls_certificate_expiration_timestamp_seconds",
    "When the serving TLS certificate (tlsCertificateFilePath, its leaf) expires, epoch "
    "seconds; re-read with the certificate",
    ["certificate"],
    registry=REGISTRY,
)


def render() -> str:
    return prometheus_client.generate_latest(REGISTRY).decode()
