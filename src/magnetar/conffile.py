"""``--config FILE``: Pulsar's broker.conf / standalone.conf and BookKeeper's bookkeeper.conf.

Why: users and the operator configure processes with Pulsar's key names, and a key that is
silently ignored is worse than a refusal. So each process has one declarative table: a key
either maps to a ``magnetar`` command-line option (its argparse ``dest``, with a parser that
turns the file's text into the option's type and unit) or is a known Pulsar key whose only
accepted values are the ones that describe what Magnetar does anyway (e.g.
``authenticationEnabled=false``). Everything else is a startup error naming the key.

The file's values become the subcommand's defaults, so a flag given on the command line
overrides the file. Format: ``key=value`` lines, ``#`` / ``!`` comments, blank lines; an
empty value means "unset" (Pulsar's own files list many keys with empty values); a key given
twice takes the last value (as Java properties do).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import javaproperties

from magnetar import pulsar_keys
from magnetar.security import authn, tls
from magnetar.wire import urls

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration file Magnetar refuses: the message names the file, key and line."""


@dataclass(frozen=True, slots=True)
class Opt:
    """A key that sets the command-line option ``dest`` (``parse`` converts text and unit).
    ``empty``: an empty value is passed to ``parse`` (Pulsar's ``brokerServicePort=``
    switches the listener off) instead of meaning "unset"."""

    dest: str
    parse: Callable[[str], object] = str
    empty: bool = False


@dataclass(frozen=True, slots=True)
class Fixed:
    """A known key for something Magnetar does one way only: ``accepted`` values pass (they
    describe Magnetar's behaviour), any other is refused with ``why``."""

    accepted: frozenset[str]
    why: str


Table = Mapping[str, Opt | Fixed]


# --- value parsers (raise ValueError with what was expected) ----------------------------------


def _int(text: str) -> int:
    return int(text)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("expected a positive integer")
    return value


def positive_int(text: str) -> int:
    """A positive integer (the CLI's flag of a key parsed with :func:`_positive_int`)."""
    return _positive_int(text)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (the CLI's flag of a key parsed with :func:`_non_negative_int`)."""
    return _non_negative_int(text)


def fraction(text: str) -> float:
    """A number above 0 and at most 1."""
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError("expected a number above 0 and at most 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("expected an integer >= 0")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError("expected a port number (0-65535)")
    return value


def _float(text: str) -> float:
    return float(text)


def optional_port(text: str) -> int | None:
    """A port, or empty / ``off`` for no listener (Pulsar leaves the key empty)."""
    if text.strip().lower() in ("", "off", "none"):
        return None
    return _port(text)


def csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def authentication_providers(text: str) -> tuple[str, ...]:
    """authenticationProviders: Pulsar's provider class names (or Magnetar's method names
    tls / token / basic) as methods."""
    methods = []
    for name in csv(text):
        method = authn.PROVIDER_CLASSES.get(
            name, name if name in ("tls", "token", "basic") else None
        )
        if method is None:
            known = ", ".join(authn.PROVIDER_CLASSES)
            raise ValueError(f"unsupported authentication provider {name!r}: one of {known}")
        methods.append(method)
    return tuple(methods)


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise ValueError("expected true or false")


def _millis_to_s(text: str) -> float:
    return float(text) / 1000.0


def _minutes_to_s(text: str) -> float:
    return float(text) * 60.0


def _mbytes_to_bytes(text: str) -> int:
    return _positive_int(text) * 1024 * 1024


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError("expected one of " + ", ".join(choices))
        return text

    return parse


def listeners(text: str) -> tuple[tuple[str, str], ...]:
    """Pulsar's advertisedListeners, ``name:pulsar://host:port[,name:pulsar+ssl://host:port]
    [,name2:...]``, as (name, URL) pairs in the order given (BrokerConfig checks them as a
    whole: docs/configuration.md)."""
    pairs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, url = item.partition(":")
        name, url = name.strip(), url.strip()
        if not sep or not name or "://" not in url:
            raise ValueError(
                f"expected name:pulsar://host:port or name:pulsar+ssl://host:port, got {item!r}"
            )
        try:
            urls.parse_broker_url(url)
        except urls.BadUrlError as err:
            raise ValueError(f"listener {name!r}: {err}") from None
        pairs.append((name, url))
    return tuple(pairs)


def _one_dir(text: str) -> str:
    """BookKeeper's directory lists (comma-separated): Magnetar uses one directory each."""
    dirs = [d.strip() for d in text.split(",") if d.strip()]
    if len(dirs) != 1:
        raise ValueError("Magnetar uses one directory here; got " + ", ".join(dirs))
    return dirs[0]


def metadata_url(text: str) -> str:
    """Pulsar's ``etcd:http://h:p,http://h2:p`` (optionally ``metadata-store:`` first, as
    BookKeeper's metadataServiceUri has it) or Magnetar's ``etcd://h:p,h2:p``, as the latter;
    ``https://`` endpoints (all of them, not a mix) give ``etcd://h:p,h2:p?tls=true``."""
    url = text.removeprefix("metadata-store:")
    if url.startswith("etcd://"):
        return url
    if url.startswith("etcd:"):
        hosts = []
        schemes = set()
        for endpoint in url.removeprefix("etcd:").split(","):
            endpoint = endpoint.strip()
            scheme, sep, rest = endpoint.partition("://")
            if sep and scheme not in ("http", "https"):
                raise ValueError(f"etcd endpoint {endpoint!r}: expected http:// or https://")
            schemes.add(scheme if sep else "http")
            hosts.append((rest if sep else endpoint).rstrip("/"))
        if len(schemes) > 1:
            raise ValueError("etcd endpoints mix http:// and https://: use one for all")
        return "etcd://" + ",".join(hosts) + ("?tls=true" if schemes == {"https"} else "")
    raise ValueError("expected an etcd URL (etcd:http://host:port[,...] or etcd://host:port)")


# --- the tables ---------------------------------------------------------------------------------

_NOT_IMPLEMENTED: dict[str, Opt | Fixed] = {
    "authenticationEnabled": Fixed(frozenset({"false"}), "authentication is not implemented"),
    "authorizationEnabled": Fixed(frozenset({"false"}), "authorization is not implemented"),
    "tlsEnabled": Fixed(frozenset({"false"}), "TLS is not implemented"),
}

_SECURITY: dict[str, Opt | Fixed] = {
    "brokerServicePortTls": Opt("tls_port", _port),
    "webServicePortTls": Opt("https_port", _port),
    "tlsEnabled": Fixed(
        frozenset({"true", "false"}), "deprecated in Pulsar: the TLS ports switch TLS on"
    ),
    "tlsCertificateFilePath": Opt("tls_certificate_file"),
    "tlsKeyFilePath": Opt("tls_key_file"),
    "tlsTrustCertsFilePath": Opt("tls_trust_certs_file"),
    "tlsAllowInsecureConnection": Opt("tls_allow_insecure_connection", parse_bool),
    "tlsRequireTrustedClientCertOnConnect": Opt(
        "tls_require_trusted_client_cert_on_connect", parse_bool
    ),
    "tlsProtocols": Opt("tls_protocols", tls.parse_protocols),
    "tlsCiphers": Opt("tls_ciphers", tls.parse_ciphers),
    "tlsCertRefreshCheckDurationSec": Opt("tls_cert_refresh_check", _float),
    "authenticationEnabled": Opt("authentication_enabled", parse_bool),
    "authenticationProviders": Opt("authentication_providers", authentication_providers),
    "authenticationRefreshCheckSeconds": Opt("authentication_refresh_check", _float),
    "tokenSecretKey": Opt("token_secret_key"),
    "tokenPublicKey": Opt("token_public_key"),
    "tokenPublicAlg": Fixed(
        frozenset(
            {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}
        ),
        "the algorithms a token may use follow from tokenPublicKey's key type",
    ),
    "tokenAuthClaim": Opt("token_auth_claim"),
    "tokenAudienceClaim": Opt("token_audience_claim"),
    "tokenAudience": Opt("token_audience"),
    "tokenAllowedClockSkewSeconds": Opt("token_allowed_clock_skew", _float),
    "basicAuthConf": Opt("basic_auth_conf"),
    "anonymousUserRole": Opt("anonymous_user_role"),
    "authorizationEnabled": Opt("authorization_enabled", parse_bool),
    "superUserRoles": Opt("super_user_roles", csv),
    "proxyRoles": Opt("proxy_roles", csv),
    "authenticateMetricsEndpoint": Opt("authenticate_metrics_endpoint", parse_bool),
    "brokerClientAuthenticationPlugin": Opt("broker_client_authentication_plugin"),
    "brokerClientAuthenticationParameters": Opt("broker_client_authentication_parameters"),
    "brokerClientTlsEnabled": Opt("broker_client_tls_enabled", parse_bool),
    "brokerClientTrustCertsFilePath": Opt("broker_client_trust_certs_file"),
    "brokerClientCertificateFilePath": Opt("broker_client_certificate_file"),
    "brokerClientKeyFilePath": Opt("broker_client_key_file"),
    "tlsHostnameVerificationEnabled": Opt("tls_hostname_verification_enabled", parse_bool),
}
"""TLS listeners, authentication and authorization of a broker or standalone, with
Pulsar's keys (docs/security.md)."""

PROXY_SECURITY_LEFT_OUT: frozenset[str] = frozenset(
    {
        "brokerServicePortTls",
        "tlsEnabled",
        "authorizationEnabled",
        "proxyRoles",
        "brokerClientTlsEnabled",
    }
)
"""Broker keys of :data:`_SECURITY` that a proxy.conf does not take (Pulsar's proxy has
servicePortTls, tlsEnabledWithBroker and its own authorizationEnabled instead)."""

_BACKLOG_QUOTA: dict[str, Opt | Fixed] = {
    "backlogQuotaCheckEnabled": Opt("backlog_quota_check_enabled", parse_bool),
    "backlogQuotaCheckIntervalInSeconds": Opt("backlog_quota_check_interval", _positive_int),
    "backlogQuotaDefaultLimitBytes": Opt("backlog_quota_default_limit_bytes", _int),
    "backlogQuotaDefaultLimitGB": Opt("backlog_quota_default_limit_gb", _float),
    "backlogQuotaDefaultLimitSecond": Opt("backlog_quota_default_limit_second", _int),
    "backlogQuotaDefaultRetentionPolicy": Opt(
        "backlog_quota_default_retention_policy",
        _choice("producer_request_hold", "producer_exception", "consumer_backlog_eviction"),
    ),
}
"""broker.conf / standalone.conf: backlog quotas (magnetar.broker.backlog_quota)."""

_BROKER_NOT_IMPLEMENTED: dict[str, Opt | Fixed] = {
    **_SECURITY,
    # Magnetar's placement always spreads write sets over racks when bookies carry racks
    "bookkeeperClientRackawarePolicyEnabled": Fixed(
        frozenset({"true"}), "Magnetar's bookie placement is always rack-aware"
    ),
}

_SERVING: dict[str, Opt | Fixed] = {
    "advertisedAddress": Opt("advertised_address"),
    "bindAddress": Opt("bind_address"),
    "brokerServicePort": Opt("port", optional_port, empty=True),
    "webServicePort": Opt("http_port", optional_port, empty=True),
    "keepAliveIntervalSeconds": Opt("keepalive_interval", _float),
    "allowAutoTopicCreationType": Opt(
        "auto_topic_creation_type", _choice("non-partitioned", "partitioned")
    ),
    "defaultNumPartitions": Opt("default_num_partitions", _positive_int),
    "managedLedgerMaxEntriesPerLedger": Opt("max_entries_per_ledger", _positive_int),
    "managedLedgerCacheSizeMB": Opt("managed_ledger_cache_size_mb", _non_negative_int),
    "managedLedgerCacheEvictionWatermark": Opt("managed_ledger_cache_eviction_watermark", fraction),
}

_OFFLOAD: dict[str, Opt | Fixed] = {
    "managedLedgerOffloadDriver": Opt("offload_driver", _choice("aws-s3", "S3")),
    "s3ManagedLedgerOffloadBucket": Opt("offload_bucket"),
    "s3ManagedLedgerOffloadRegion": Opt("offload_region"),
    "s3ManagedLedgerOffloadServiceEndpoint": Opt("offload_endpoint"),
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes": Opt("offload_block_size", _positive_int),
    "magnetarOffloadPathStyle": Opt("offload_path_style", _choice("true", "false")),
    "magnetarOffloadReadCacheBytes": Opt("offload_read_cache_bytes", _int),
    "magnetarOffloadKeyPrefix": Opt("offload_key_prefix"),
    "magnetarOffloadCredentialsFile": Opt("offload_credentials_file"),
    "magnetarOffloadCredentialsProfile": Opt("offload_credentials_profile"),
    "magnetarOffloadConnectTimeoutMs": Opt("offload_connect_timeout_ms", _positive_int),
    "magnetarOffloadReadTimeoutMs": Opt("offload_read_timeout_ms", _positive_int),
    "magnetarOffloadMaxAttempts": Opt("offload_max_attempts", _positive_int),
    "managedLedgerOffloadDeletionLagMs": Opt("offload_deletion_lag_ms", _int),
    "managedLedgerOffloadThresholdInBytes": Opt("offload_threshold_bytes", _int),
    "managedLedgerOffloadThresholdInSeconds": Opt("offload_threshold_seconds", _int),
    # Pulsar's older name of the size threshold
    "managedLedgerOffloadAutoTriggerSizeThresholdBytes": Opt("offload_threshold_bytes", _int),
}
"""Tiered storage (docs/offload.md): Pulsar's names, and magnetarOffload* for what Pulsar's
S3 driver configures elsewhere."""

_FORCE_DELETE: dict[str, Opt | Fixed] = {
    "enableReplicatedSubscriptions": Opt("replicated_subscriptions_enabled", parse_bool),
    "replicationProducerQueueSize": Opt("replication_producer_queue_size", positive_int),
    "replicatedSubscriptionsSnapshotFrequencyMillis": Opt(
        "replicated_subscriptions_snapshot_frequency", _millis_to_s
    ),
    "replicatedSubscriptionsSnapshotTimeoutSeconds": Opt(
        "replicated_subscriptions_snapshot_timeout", _positive_int
    ),
    "replicatedSubscriptionsSnapshotMaxCachedPerSubscription": Opt(
        "replicated_subscriptions_snapshot_max_cached", _positive_int
    ),
    "forceDeleteTenantAllowed": Opt("force_delete_tenant_allowed", parse_bool),
    "exposeTopicLevelMetricsInPrometheus": Opt(
        "expose_topic_level_metrics_in_prometheus", parse_bool
    ),
    "exposeConsumerLevelMetricsInPrometheus": Opt(
        "expose_consumer_level_metrics_in_prometheus", parse_bool
    ),
    "preciseDispatcherFlowControl": Opt("precise_dispatcher_flow_control", parse_bool),
    "forceDeleteNamespaceAllowed": Opt("force_delete_namespace_allowed", parse_bool),
    "transactionCoordinatorEnabled": Opt("transaction_coordinator_enabled", parse_bool),
}


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("expected a positive number")
    return value


_PEM_ONLY = "Magnetar reads PEM files only (no JKS/PKCS12 key or trust stores)"
_UNENCRYPTED_KEYS_ONLY = "Magnetar reads unencrypted PEM keys only (no key store password)"
_TLS_CONTEXT_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"

_METADATA_TLS: dict[str, Opt | Fixed] = {
    "metadataStoreConfigPath": Opt("metadata_config_path"),
}
"""TLS to etcd (docs/security.md): ``https://`` endpoints in the metadata URL and Pulsar's
etcd settings file (useTls, tlsTrustCertsFilePath, tlsCertificateFilePath, tlsKeyFilePath,
authority: :func:`metadata_store_config`)."""

_BROKER_BOOKKEEPER_TLS: dict[str, Opt | Fixed] = {
    "bookkeeperTLSClientAuthentication": Opt("bookkeeper_tls_client_authentication", parse_bool),
    "bookkeeperTLSTrustCertsFilePath": Opt("bookkeeper_tls_trust_certs_file"),
    "bookkeeperTLSCertificateFilePath": Opt("bookkeeper_tls_certificate_file"),
    "bookkeeperTLSKeyFilePath": Opt("bookkeeper_tls_key_file"),
    "bookkeeperTLSCertFilesRefreshDurationSeconds": Opt(
        "bookkeeper_tls_cert_refresh_check", _positive_float
    ),
    "bookkeeperTLSProviderFactoryClass": Fixed(
        frozenset({_TLS_CONTEXT_FACTORY}), "Magnetar's bookie client TLS is gRPC's"
    ),
    "bookkeeperTLSKeyFileType": Fixed(frozenset({"PEM"}), _PEM_ONLY),
    "bookkeeperTLSTrustCertTypes": Fixed(frozenset({"PEM"}), _PEM_ONLY),
    "bookkeeperTLSKeyStorePasswordPath": Fixed(frozenset(), _UNENCRYPTED_KEYS_ONLY),
    "bookkeeperTLSTrustStorePasswordPath": Fixed(frozenset(), _PEM_ONLY),
}
"""broker.conf: the broker's gRPC channels to bookies over (mutual) TLS (docs/security.md)."""

_BOOKIE_TLS: dict[str, Opt | Fixed] = {
    "tlsProviderFactoryClass": Opt("tls_provider_factory", _choice(_TLS_CONTEXT_FACTORY)),
    "tlsProvider": Fixed(
        frozenset({"OpenSSL", "JDK"}), "Magnetar's bookie TLS is gRPC's, whatever the provider"
    ),
    "tlsCertificatePath": Opt("tls_certificate_file"),
    "tlsKeyStore": Opt("tls_key_file"),
    "tlsTrustStore": Opt("tls_trust_certs_file"),
    "tlsClientAuthentication": Opt("tls_client_authentication", parse_bool),
    "tlsCertFilesRefreshDurationSeconds": Opt("tls_cert_refresh_check", _positive_float),
    "tlsKeyStoreType": Fixed(frozenset({"PEM"}), _PEM_ONLY),
    "tlsTrustStoreType": Fixed(frozenset({"PEM"}), _PEM_ONLY),
    "tlsKeyStorePasswordPath": Fixed(frozenset(), _UNENCRYPTED_KEYS_ONLY),
    "tlsTrustStorePasswordPath": Fixed(frozenset(), _PEM_ONLY),
}
"""bookkeeper.conf: the bookie's gRPC port over (mutual) TLS (docs/security.md)."""

BROKER: Table = {
    **_SERVING,
    "clusterName": Opt("cluster_name"),
    # where function instances run (docs/functions.md, "On Kubernetes"); Pulsar configures
    # its functions worker in a file of its own
    "magnetarFunctionsRuntime": Opt("functions_runtime", _choice("none", "kubernetes")),
    "advertisedListeners": Opt("advertised_listeners", listeners),
    "internalListenerName": Opt("internal_listener_name"),
    "metadataStoreUrl": Opt("metadata_url", metadata_url),
    "metadataStoreSessionTimeoutMillis": Opt("session_ttl", _millis_to_s),
    "managedLedgerDefaultEnsembleSize": Opt("ensemble_size", _positive_int),
    "managedLedgerDefaultWriteQuorum": Opt("write_quorum", _positive_int),
    "managedLedgerDefaultAckQuorum": Opt("ack_quorum", _positive_int),
    "managedLedgerMaxSizePerLedgerMbytes": Opt("max_ledger_bytes", _mbytes_to_bytes),
    "managedLedgerMaxLedgerRolloverTimeMinutes": Opt("max_ledger_age", _minutes_to_s),
    "managedLedgerMinLedgerRolloverTimeMinutes": Opt("min_ledger_age", _minutes_to_s),
    "defaultNumberOfNamespaceBundles": Opt("default_bundles", _positive_int),
    "maxMessageSize": Opt("max_message_size", _positive_int),
    "allowAutoTopicCreation": Opt("allow_auto_topic_creation", parse_bool),
    "brokerDeduplicationEnabled": Opt("deduplication_enabled", parse_bool),
    "brokerDeduplicationEntriesInterval": Opt("deduplication_entries_interval", _positive_int),
    "brokerDeduplicationMaxNumberOfProducers": Opt("deduplication_max_producers", _positive_int),
    "brokerDeduplicationProducerInactivityTimeoutMinutes": Opt(
        "deduplication_producer_inactivity", _minutes_to_s
    ),
    "brokerServiceCompactionThresholdInBytes": Opt("compaction_threshold", _non_negative_int),
    "bookkeeperClientMinNumRacksPerWriteQuorum": Opt("min_racks_per_write_quorum", _positive_int),
    "bookkeeperClientEnforceMinNumRacksPerWriteQuorum": Opt(
        "enforce_min_racks_per_write_quorum", parse_bool
    ),
    **_FORCE_DELETE,
    **_BACKLOG_QUOTA,
    **_OFFLOAD,
    **_BROKER_NOT_IMPLEMENTED,
    **_METADATA_TLS,
    **_BROKER_BOOKKEEPER_TLS,
}
"""broker.conf keys of ``magnetar broker``."""

_STANDALONE_ONLY = "a standalone stores every entry once, in its one bookie"

STANDALONE: Table = {
    **_SERVING,
    "bookiePort": Opt("bookie_port", _port),
    "clusterName": Opt("cluster_name"),
    "managedLedgerDefaultEnsembleSize": Fixed(frozenset({"1"}), _STANDALONE_ONLY),
    "managedLedgerDefaultWriteQuorum": Fixed(frozenset({"1"}), _STANDALONE_ONLY),
    "managedLedgerDefaultAckQuorum": Fixed(frozenset({"1"}), _STANDALONE_ONLY),
    "brokerDeduplicationEnabled": Opt("deduplication_enabled", parse_bool),
    "brokerDeduplicationEntriesInterval": Opt("deduplication_entries_interval", _positive_int),
    "brokerServiceCompactionThresholdInBytes": Opt("compaction_threshold", _non_negative_int),
    **_FORCE_DELETE,
    **_BACKLOG_QUOTA,
    **_OFFLOAD,
    **_BROKER_NOT_IMPLEMENTED,
}
"""standalone.conf keys of ``magnetar standalone``."""

_AUTORECOVERY: dict[str, Opt | Fixed] = {
    "lostBookieRecoveryDelay": Opt("lost_bookie_recovery_delay", _float),
    # Magnetar's earlier name for it, still read (BookKeeper's is the one above)
    "auditorLostBookieRecoveryDelay": Opt("lost_bookie_recovery_delay", _float),
    "auditorPeriodicCheckInterval": Opt("periodic_check_interval", _float),
    "openLedgerRereplicationGracePeriod": Opt("open_ledger_grace", _millis_to_s),
    "replicationRateByBytes": Opt("replication_rate_by_bytes", _int),
    "minNumRacksPerWriteQuorum": Opt("min_racks_per_write_quorum", _positive_int),
    "enforceMinNumRacksPerWriteQuorum": Opt("enforce_min_racks_per_write_quorum", parse_bool),
}
"""bookkeeper.conf: the auditor's and the recovery workers' settings, read by a bookie with
``autoRecoveryDaemonEnabled`` and by ``magnetar autorecovery`` alike."""

BOOKIE: Table = {
    "metadataServiceUri": Opt("metadata_url", metadata_url),
    "bookiePort": Opt("port", _port),
    "httpServerPort": Opt("http_port", _port),
    "httpServerEnabled": Fixed(frozenset({"true"}), "the bookie's HTTP server is always on"),
    "advertisedAddress": Opt("advertised_address"),
    "journalDirectory": Opt("journal_dir", _one_dir),
    "journalDirectories": Opt("journal_dir", _one_dir),
    "ledgerDirectories": Opt("data_dir", _one_dir),
    "journalMaxGroupWaitMSec": Opt("journal_group_wait_ms", _float),
    "flushInterval": Opt("flush_interval", _millis_to_s),
    "gcWaitTime": Opt("gc_interval", _millis_to_s),
    "diskUsageThreshold": Opt("disk_usage_threshold", _float),
    "autoRecoveryDaemonEnabled": Opt("autorecovery", parse_bool),
    **_AUTORECOVERY,
    **_NOT_IMPLEMENTED,
    **_METADATA_TLS,
    **_BOOKIE_TLS,
}
"""bookkeeper.conf keys of ``magnetar bookie``."""

AUTORECOVERY: Table = {
    "metadataServiceUri": Opt("metadata_url", metadata_url),
    **_AUTORECOVERY,
    **_METADATA_TLS,
}
"""bookkeeper.conf keys of ``magnetar autorecovery``, which reads the bookies' file as
BookKeeper's autorecovery does; the bookie's own keys in it (ports, directories, the
bookie's TLS) are ignored. Its ports and its TLS towards the bookies are flags only."""

_PROXY_SECURITY: dict[str, Opt | Fixed] = {
    **{key: rule for key, rule in _SECURITY.items() if key not in PROXY_SECURITY_LEFT_OUT},
    "servicePortTls": Opt("tls_port", _port),
    "tlsEnabledInProxy": Fixed(
        frozenset({"true", "false"}), "deprecated in Pulsar: the TLS ports switch TLS on"
    ),
    "tlsEnabledWithBroker": Opt("tls_enabled_with_broker", parse_bool),
    "forwardAuthorizationCredentials": Opt("forward_authorization_credentials", parse_bool),
    "brokerServiceURLTLS": Opt("broker_service_url_tls"),
    "brokerWebServiceURLTLS": Opt("broker_web_service_url_tls"),
    "authorizationEnabled": Fixed(
        frozenset({"false"}),
        "the proxy does not authorize: the brokers authorize each client's lookups and topic "
        "connections as its original principal (docs/security.md)",
    ),
}
"""The proxy's TLS listeners, client authentication and its own TLS and credentials towards
the brokers (docs/security.md, "The proxy"): the broker's keys, less the broker-only ones."""

PROXY: Table = {
    "bindAddress": Opt("bind_address"),
    "servicePort": Opt("port", optional_port, empty=True),
    "webServicePort": Opt("http_port", optional_port, empty=True),
    "metadataStoreUrl": Opt("metadata_url", metadata_url),
    "brokerServiceURL": Opt("broker_service_url"),
    "brokerWebServiceURL": Opt("broker_web_service_url"),
    "maxMessageSize": Opt("max_message_size", _positive_int),
    "maxConcurrentInboundConnections": Opt("max_concurrent_inbound_connections", _non_negative_int),
    "maxConcurrentInboundConnectionsPerIp": Opt(
        "max_concurrent_inbound_connections_per_ip", _non_negative_int
    ),
    **_METADATA_TLS,
    **_PROXY_SECURITY,
}
"""proxy.conf keys of ``magnetar proxy``."""

TABLES: Mapping[str, Table] = {
    "broker": BROKER,
    "standalone": STANDALONE,
    "bookie": BOOKIE,
    "autorecovery": AUTORECOVERY,
    "proxy": PROXY,
}


# --- reading ------------------------------------------------------------------------------------


def parse_lines(text: str, *, name: str) -> dict[str, tuple[int, str]]:
    """``key -> (line number, value)`` of a file read as Java ``.properties``, as Pulsar
    reads its configuration (``key=value``, ``key: value`` or ``key value``; ``#`` and ``!``
    comments; a ``\\`` at the end of a line continues it; ``\\uXXXX`` escapes), by the
    maintained ``javaproperties`` parser. Values are trimmed as Pulsar trims them; an empty
    value is kept as "": it means "unset" except for keys whose :class:`Opt` takes
    ``empty``."""
    out: dict[str, tuple[int, str]] = {}
    number = 1
    try:
        for item in javaproperties.parse(text):
            if isinstance(item, javaproperties.KeyValue):
                if not item.key.strip():
                    raise ConfigError(f"{name}:{number}: a value without a key: {item.source!r}")
                out[item.key.strip()] = (number, item.value.strip())
            number += item.source.count("\n")
    except javaproperties.InvalidUEscapeError as err:
        raise ConfigError(f"{name}:{number}: {err}") from None
    return out


_NOT_USED_LOG = "keys of Apache Pulsar's that Magnetar does not use, ignored"
"""Start of the one line a configuration file's not-applicable keys are reported in."""


def options(
    table: Table,
    entries: Mapping[str, tuple[int, str]],
    *,
    name: str,
    known: frozenset[str] = frozenset(),
) -> dict[str, object]:
    """The option values (``dest -> value``) that ``entries`` set, checked against ``table``.
    A key ``table`` lacks but Pulsar knows for this file (``known``, pulsar_keys.py) is
    ignored and reported once, in one log line; any other is refused, with the closest known
    key when one is close."""
    out: dict[str, object] = {}
    ignored: list[str] = []
    for key, (number, value) in entries.items():
        rule = table.get(key)
        if rule is None and key in known:
            if value:
                ignored.append(key)
            continue
        if rule is not None and not value and not (isinstance(rule, Opt) and rule.empty):
            continue  # unset
        if rule is None:
            close = difflib.get_close_matches(key, [*table, *known], n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{name}: unknown key {key!r} (line {number}), one Apache Pulsar does not "
                f"know either{hint}"
            )
        if isinstance(rule, Fixed):
            if value not in rule.accepted:
                allowed = " or ".join(repr(v) for v in sorted(rule.accepted)) or "no value"
                raise ConfigError(
                    f"{name}: unsupported value {key}={value} (line {number}): {rule.why}; "
                    f"{allowed} accepted"
                )
            continue
        try:
            out[rule.dest] = rule.parse(value)
        except ValueError as err:
            raise ConfigError(f"{name}: {key}={value} (line {number}): {err}") from None
    if ignored:
        log.warning("%s: %d %s: %s", name, len(ignored), _NOT_USED_LOG, ", ".join(sorted(ignored)))
    return out


KNOWN: Mapping[str, frozenset[str]] = {
    "broker": pulsar_keys.BROKER,
    "standalone": pulsar_keys.BROKER | pulsar_keys.BOOKKEEPER,
    "bookie": pulsar_keys.BOOKKEEPER,
    "autorecovery": pulsar_keys.BOOKKEEPER,
    "proxy": pulsar_keys.PROXY,
}
"""Apache Pulsar's keys of each command's file: broker.conf, standalone.conf (the broker's
and, for its bookie, BookKeeper's), bookkeeper.conf (the bookie's and autorecovery's),
proxy.conf."""


def load(path: Path, table: Table, known: frozenset[str] = frozenset()) -> dict[str, object]:
    """Read ``path`` and return ``dest -> value`` for the subcommand's defaults."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror or err}") from None
    return options(table, parse_lines(text, name=path.name), name=path.name, known=known)


# --- Pulsar's etcd settings file (metadataStoreConfigPath) ---------------------------------------

METADATA_STORE_CONFIG: Table = {
    "useTls": Opt("use_tls", parse_bool),
    "tlsProvider": Fixed(
        frozenset({"JDK", "OpenSSL"}), "Magnetar's etcd TLS is gRPC's, whatever the provider"
    ),
    "tlsTrustCertsFilePath": Opt("trust_certs_file"),
    "tlsCertificateFilePath": Opt("cert_file"),
    "tlsKeyFilePath": Opt("key_file"),
    "authority": Opt("authority"),
}
"""The keys of Pulsar's etcd settings file (the file ``metadataStoreConfigPath`` names)."""


def metadata_store_config(path: Path) -> dict[str, object]:
    """Read Pulsar's etcd settings file: flat ``key: value`` lines (the YAML Pulsar reads) or
    ``key=value`` lines; ``#`` comments. Returns ``dest -> value`` of
    :data:`METADATA_STORE_CONFIG`; ConfigError names a key or value it refuses."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror or err}") from None
    lines = []  # as key=value, one per line of the file (line numbers kept for errors)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#") or line == "---":
            lines.append("")
            continue
        if raw[:1].isspace() or line.startswith("- "):
            raise ConfigError(f"{path.name}:{number}: expected flat key: value lines")
        colon, equals = line.find(":"), line.find("=")
        if colon > 0 and (equals < 0 or colon < equals):
            key, value = line[:colon].strip(), line[colon + 1 :].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            elif value in ("null", "~"):
                value = ""
            line = f"{key}={value}"
        lines.append(line)
    entries = parse_lines("\n".join(lines), name=path.name)
    return options(METADATA_STORE_CONFIG, entries, name=path.name)
