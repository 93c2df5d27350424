"""Every knob of a broker, in one frozen dataclass with sane defaults.

Why: the ``magnetar broker`` and ``magnetar standalone`` commands, the tests and (later) the
operator build the same object; the broker reads nothing else (no environment, no globals).
Names follow Pulsar's ``broker.conf`` where an equivalent exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.common import grpctls
from magnetar.managed_ledger.api import ManagedLedgerConfig
from magnetar.offload.config import S3Config
from magnetar.security.config import SecurityConfig
from magnetar.wire import frames, urls


@dataclass(frozen=True, slots=True)
class Listener:
    """One of Pulsar's advertisedListeners: its name and URLs."""

    name: str
    url: str
    """``pulsar://host:port``."""
    url_tls: str = ""
    """``pulsar+ssl://host:port`` ("" when the broker has no TLS port)."""


def group_listeners(pairs: tuple[tuple[str, str], ...]) -> tuple[Listener, ...]:
    """advertisedListeners' (name, URL) pairs as listeners, in the order of the names'
    first appearance (BrokerConfig has checked them)."""
    found: dict[str, dict[bool, str]] = {}
    for name, url in pairs:
        found.setdefault(name, {})[urls.parse_broker_url(url)[1]] = url
    return tuple(Listener(n, u.get(False, ""), u.get(True, "")) for n, u in found.items())


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    cluster_name: str = "standalone"
    bind_address: str = "0.0.0.0"
    port: int | None = 6650
    """Pulsar binary protocol port (brokerServicePort); None: no plaintext listener."""
    http_port: int | None = 8080
    """Admin REST, lookup and /metrics (webServicePort); None: no plaintext HTTP."""
    tls_port: int | None = None
    """brokerServicePortTls: ``pulsar+ssl://`` (security.tls holds the certificate)."""
    https_port: int | None = None
    """webServicePortTls: HTTPS for the admin REST API, lookup and /metrics."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    """TLS settings, authentication and authorization (docs/security.md)."""
    advertised_address: str = "127.0.0.1"
    """Host part of the URLs lookups hand out: the address clients reach this broker at."""
    advertised_listeners: tuple[tuple[str, str], ...] = ()
    """Pulsar's advertisedListeners: (name, ``pulsar://host:port`` or
    ``pulsar+ssl://host:port``) pairs, each name with one ``pulsar://`` URL and, when the
    broker has a TLS port, one ``pulsar+ssl://`` URL. A lookup naming a listener (the
    client's ``listenerName``) answers that listener's URLs; one naming an unknown listener
    fails. Empty: lookups answer ``pulsar://advertised_address:port`` (and the TLS URL)."""
    internal_listener_name: str | None = None
    """internalListenerName: the listener brokers, the proxy and clients naming no listener
    use (its URL is this broker's service URL); default the first listener."""

    max_message_size: int = frames.DEFAULT_MAX_MESSAGE_SIZE
    """Announced in CONNECTED; frames up to this plus frames.FRAME_PADDING are accepted."""
    keepalive_interval_s: float = 30.0
    """A connection silent this long is pinged; silent for another interval, it is closed.
    Also the time a client has to complete the handshake."""
    write_buffer_high: int = 2 * 1024 * 1024
    """Outgoing bytes buffered for one client above which it counts as not writable."""
    write_buffer_low: int = 512 * 1024

    session_ttl_s: float = 10.0
    """Lease of the broker's registration and bundle ownerships."""
    default_bundles: int = 4
    """Bundles of a namespace created by the broker (``public/default``)."""
    allow_auto_topic_creation: bool = True
    auto_topic_creation_type: str = "non-partitioned"
    """``non-partitioned`` or ``partitioned`` (namespace policies may override)."""
    default_num_partitions: int = 1
    stats_interval_s: float = 5.0
    """Rates (msg/s, bytes/s) are computed over windows of this length."""
    non_persistent_inactive_s: float = 60.0
    """A non-persistent topic with no producer and no consumer for this long is dropped from
    memory (Pulsar's brokerDeleteInactiveTopicsMaxInactiveDurationSeconds); checked every
    stats interval; 0 or less: never."""
    load_report_interval_s: float = 5.0

    expose_topic_level_metrics: bool = True
    """Pulsar's exposeTopicLevelMetricsInPrometheus: /metrics has a series per topic (and
    subscription); off, the topic series are summed per namespace (labels cluster,
    namespace)."""
    expose_consumer_level_metrics: bool = False
    """Pulsar's exposeConsumerLevelMetricsInPrometheus: ``pulsar_consumer_*`` per consumer
    (with topic-level metrics on)."""
    precise_dispatcher_flow_control: bool = False
    """Pulsar's preciseDispatcherFlowControl. Off (Pulsar's default), an Exclusive or
    Failover subscription reads as many entries as its consumer has permits (up to 100) and
    sends them all, so batches may take the consumer's permits below zero; on, it reads
    permits / the average messages per entry and stops at the permits (docs/configuration.md,
    "Dispatch flow control")."""

    deduplication_enabled: bool = False
    """Pulsar's brokerDeduplicationEnabled: the default when neither the namespace nor the
    topic sets ``deduplicationEnabled``."""
    deduplication_entries_interval: int = 1000
    """brokerDeduplicationEntriesInterval: a snapshot every this many stored entries (the
    most a topic replays when it loads)."""
    deduplication_producer_inactivity_s: float = 6 * 3600.0
    """brokerDeduplicationProducerInactivityTimeoutMinutes (in seconds): a disconnected
    producer's last sequence id is forgotten after this long."""
    deduplication_max_producers: int = 10_000
    """brokerDeduplicationMaxNumberOfProducers: producers kept in a snapshot."""

    managed_ledger_cache_size_mb: int | None = None
    """managedLedgerCacheSizeMB: the entry caches of all of the broker's topics share this
    budget (0: no cache); None: a fifth of the memory the broker may use, 64 MiB to 1 GiB
    (``managed_ledger.cache.default_size_mb``). A broker of N worker processes gives each
    an N-th."""
    managed_ledger_cache_eviction_watermark: float = 0.9
    """managedLedgerCacheEvictionWatermark: a full cache is brought down to this fraction."""

    replication_producer_queue_size: int = 1000
    """Pulsar's replicationProducerQueueSize: the window of a replicator, entries read and
    sent to the remote cluster whose receipts have not all come back (docs/geo-replication.md)."""
    replicated_subscriptions_enabled: bool = True
    """Pulsar's enableReplicatedSubscriptions: subscriptions whose consumers ask for it
    (``replicate_subscription_state``) have their positions carried to the other clusters
    (docs/geo-replication.md)."""
    replicated_subscriptions_snapshot_frequency_s: float = 1.0
    """replicatedSubscriptionsSnapshotFrequencyMillis (in seconds)."""
    replicated_subscriptions_snapshot_timeout_s: float = 30.0
    """replicatedSubscriptionsSnapshotTimeoutSeconds."""
    replicated_subscriptions_snapshot_max_cached: int = 10
    """replicatedSubscriptionsSnapshotMaxCachedPerSubscription (kept per topic here)."""

    compaction_threshold_bytes: int = 0
    """Pulsar's brokerServiceCompactionThresholdInBytes: the ``compactionThreshold`` of topics
    whose namespace and topic policies do not set one (0: no automatic compaction)."""

    backlog_quota_check_enabled: bool = True
    """Pulsar's backlogQuotaCheckEnabled: the periodic backlog quota check (eviction, and
    disconnecting producers of a topic over its quota) runs (:mod:`magnetar.broker.backlog_quota`);
    the check at producer creation runs regardless."""
    backlog_quota_check_interval_s: float = 60.0
    """backlogQuotaCheckIntervalInSeconds: how often each topic's quotas are checked."""
    backlog_quota_default_limit_bytes: int = -1
    """backlogQuotaDefaultLimitBytes: the ``destination_storage`` limit of topics whose
    namespace and topic set none (-1: none), unless backlogQuotaDefaultLimitGB is positive."""
    backlog_quota_default_limit_gb: float = -1.0
    """backlogQuotaDefaultLimitGB: the same in GiB; when positive it wins (Pulsar's rule)."""
    backlog_quota_default_limit_s: int = -1
    """backlogQuotaDefaultLimitSecond: the default ``message_age`` limit (0 or less: none)."""
    backlog_quota_default_policy: str = "producer_request_hold"
    """backlogQuotaDefaultRetentionPolicy: the policy of the default quotas, and of a quota
    set without one."""

    force_delete_tenant_allowed: bool = False
    """Pulsar's forceDeleteTenantAllowed: ``DELETE /admin/v2/tenants/{t}?force=true`` (which
    deletes the tenant's namespaces and topics) is refused with 405 unless true."""
    force_delete_namespace_allowed: bool = False
    """Pulsar's forceDeleteNamespaceAllowed: a forced namespace delete (which deletes its
    topics) is refused with 405 unless true."""

    transaction_coordinator_enabled: bool = False
    """Pulsar's transactionCoordinatorEnabled: NEW_TXN and the other transaction commands
    are refused (NotAllowedError) unless true."""
    transaction_coordinators: int = 1
    """Partitions of ``pulsar/system/transaction_coordinator_assign`` created at first
    start: how many coordinators (Pulsar's ``--num-transaction-coordinators``)."""

    managed_ledger: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)
    """Also the broker defaults of the offload thresholds and deletion lag
    (managedLedgerOffloadThresholdInBytes/InSeconds, managedLedgerOffloadDeletionLagMs)."""
    offload: S3Config | None = None
    """Where closed ledgers are offloaded (managedLedgerOffloadDriver and the
    s3ManagedLedgerOffload* keys); None: offload is off (docs/offload.md)."""

    bookkeeper_min_racks_per_write_quorum: int = 1
    """bookkeeperClientMinNumRacksPerWriteQuorum: racks each write set should span."""
    bookkeeper_enforce_min_racks: bool = False
    """bookkeeperClientEnforceMinNumRacksPerWriteQuorum: refuse an ensemble (or a
    replacement) that would span fewer racks instead of placing it anyway
    (docs/operations.md, "Racks")."""

    # --- internal hops over TLS (docs/security.md, "Internal hops: bookies and etcd") -------
    bookkeeper_tls: grpctls.ClientTlsConfig | None = None
    """TLS of the gRPC channels to bookies (bookkeeperTLS* keys); None: plaintext."""
    metadata_tls: grpctls.ClientTlsConfig | None = None
    """TLS of the channels to etcd (https endpoints, metadataStoreConfigPath); None: as
    the metadata URL says."""

    @property
    def broker_id(self) -> str:
        """Identity in the metadata store (registration, ownership): ``host:port`` of the
        plaintext port, or of the TLS port when plaintext is off."""
        return f"{self.advertised_address}:{self.port if self.port is not None else self.tls_port}"

    def __post_init__(self) -> None:
        if self.port is None and self.tls_port is None:
            raise ValueError(
                "no Pulsar protocol listener: set brokerServicePort or brokerServicePortTls"
            )
        if self.http_port is None and self.https_port is None:
            raise ValueError("no HTTP listener: set webServicePort or webServicePortTls")
        tls = self.security.tls
        if (self.tls_port is not None or self.https_port is not None) and not (
            tls.certificate and tls.key
        ):
            raise ValueError(
                "a TLS port is set but tlsCertificateFilePath / tlsKeyFilePath are not"
            )
        self._check_listeners()

    def _check_listeners(self) -> None:
        """Pulsar's rules for advertisedListeners (its MultipleListenerValidator): per name
        one ``pulsar://`` URL, and one ``pulsar+ssl://`` URL exactly when brokerServicePortTls
        is set; no host:port under two names; internalListenerName among them."""
        schemes: dict[str, list[str]] = {}
        owner_of: dict[str, str] = {}
        for name, url in self.advertised_listeners:
            if not name:
                raise ValueError(f"advertised listener {url!r} has no name (name:{url})")
            try:
                address, tls = urls.parse_broker_url(url)
            except urls.BadUrlError as err:
                raise ValueError(f"advertised listener {name!r}: {err}") from None
            scheme = urls.TLS_SCHEME if tls else urls.PLAIN_SCHEME
            if scheme in schemes.setdefault(name, []):
                raise ValueError(f"advertised listener {name!r}: a second {scheme}:// URL")
            schemes[name].append(scheme)
            other = owner_of.setdefault(str(address), name)
            if other != name:
                raise ValueError(f"advertised listeners {other!r} and {name!r} both name {address}")
        for name, found in schemes.items():
            if urls.PLAIN_SCHEME not in found:
                raise ValueError(f"advertised listener {name!r} has no pulsar:// URL")
            if self.tls_port is None and urls.TLS_SCHEME in found:
                raise ValueError(
                    f"advertised listener {name!r} has a pulsar+ssl:// URL but the broker "
                    "has no TLS port (brokerServicePortTls)"
                )
            if self.tls_port is not None and urls.TLS_SCHEME not in found:
                raise ValueError(
                    f"advertised listener {name!r} has no pulsar+ssl:// URL, and the broker "
                    "has a TLS port (brokerServicePortTls)"
                )
        if self.internal_listener_name and self.internal_listener_name not in schemes:
            raise ValueError(
                f"internal listener {self.internal_listener_name!r} is not among the advertised "
                f"listeners {list(schemes)}"
            )

    def _internal_listener(self) -> Listener | None:
        """The internal listener (None without advertised listeners)."""
        if not self.advertised_listeners:
            return None
        name = self.internal_listener_name or self.advertised_listeners[0][0]
        return next(x for x in group_listeners(self.advertised_listeners) if x.name == name)

    @property
    def service_url(self) -> str:
        """The internal listener's URL, or ``pulsar://advertised_address:port`` (the TLS
        URL when plaintext is off)."""
        internal = self._internal_listener()
        if internal:
            return internal.url
        if self.port is None:
            return self.service_url_tls
        return f"pulsar://{self.advertised_address}:{self.port}"

    @property
    def service_url_tls(self) -> str:
        """The internal listener's ``pulsar+ssl://`` URL, else
        ``pulsar+ssl://advertised_address:tls_port``; "" without a TLS port."""
        if self.tls_port is None:
            return ""
        internal = self._internal_listener()
        if internal:
            return internal.url_tls
        return f"pulsar+ssl://{self.advertised_address}:{self.tls_port}"

    @property
    def web_service_url(self) -> str:
        """``http://advertised_address:http_port`` (the HTTPS URL when plaintext is off)."""
        if self.http_port is None:
            return self.web_service_url_tls
        return f"http://{self.advertised_address}:{self.http_port}"

    @property
    def web_service_url_tls(self) -> str:
        if self.https_port is None:
            return ""
        return f"https://{self.advertised_address}:{self.https_port}"

    @property
    def max_frame_size(self) -> int:
        return self.max_message_size + frames.FRAME_PADDING
