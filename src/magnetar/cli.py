"""The ``magnetar`` command: standalone, broker, bookie, proxy, admin, perf.

Each subcommand parses its flags here and hands over to the component's launcher.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from magnetar import __version__, conffile, native
from magnetar.broker import workers
from magnetar.broker.config import BrokerConfig
from magnetar.common import grpctls, tlsfiles
from magnetar.managed_ledger.api import ManagedLedgerConfig
from magnetar.metadata import api as metadata_api
from magnetar.offload.config import S3Config
from magnetar.security import tls
from magnetar.security.config import SecurityConfig

T = TypeVar("T")

_BC = BrokerConfig()
_ML = ManagedLedgerConfig()


def _standalone(args: argparse.Namespace) -> int:
    from magnetar import standalone
    from magnetar.common import aio, logs

    logs.setup(args.log_level)
    try:
        options = standalone.StandaloneOptions(
            data_dir=Path(args.data_dir), broker=broker_config(args), bookie_port=args.bookie_port
        )
        aio.run(standalone.run(options))
    except (ValueError, OSError) as err:
        print(f"magnetar standalone: {err}", file=sys.stderr)
        return 2
    return 0


def _broker(args: argparse.Namespace) -> int:
    from magnetar.broker import server
    from magnetar.common import aio, logs
    from magnetar.functions.kubernetes import KubernetesError

    logs.setup(args.log_level)
    try:
        config = broker_config(args)
        if args.workers < 1:
            raise ValueError(f"--workers {args.workers}: at least 1")
        if args.workers > 1:
            return _broker_workers(args, config)
        shared = workers.SharedPorts.parse(args.worker_of) if args.worker_of else None
        slot = (
            workers.WorkerSlot.parse(args.worker_slot, args.worker_dir)
            if args.worker_slot and args.worker_dir
            else None
        )
        aio.run(
            server.run(
                args.metadata_url,
                config,
                shared=shared,
                slot=slot,
                functions_runtime=args.functions_runtime,
            )
        )
    except (ValueError, OSError, KubernetesError) as err:
        print(f"magnetar broker: {err}", file=sys.stderr)
        return 2
    except metadata_api.StoreUnavailableError as err:
        print(f"magnetar broker: cannot reach the metadata store: {err}", file=sys.stderr)
        return 1
    return 0


def _broker_workers(args: argparse.Namespace, config: BrokerConfig) -> int:
    """``--workers N`` (N > 1): this process supervises N broker processes that share the
    configured ports (``broker/workers.py``)."""
    from magnetar.common import aio

    if config.advertised_listeners:
        raise ValueError(
            "--workers > 1 with advertisedListeners: a listener names one address, which "
            "several worker processes cannot share"
        )
    argv: list[str] = args.argv
    tail = argv[argv.index("broker") + 1 :]
    wanted = workers.SharedPorts(
        port=config.port,
        tls_port=config.tls_port,
        http_port=config.http_port,
        https_port=config.https_port,
    )
    aio.run(workers.run(tail, count=args.workers, host=config.bind_address, wanted=wanted))
    return 0


_BROKER_FLAGS = {
    "cluster_name": "cluster_name",
    "bind_address": "bind_address",
    "port": "port",
    "http_port": "http_port",
    "tls_port": "tls_port",
    "https_port": "https_port",
    "advertised_address": "advertised_address",
    "advertised_listeners": "advertised_listeners",
    "internal_listener_name": "internal_listener_name",
    "max_message_size": "max_message_size",
    "keepalive_interval": "keepalive_interval_s",
    "session_ttl": "session_ttl_s",
    "default_bundles": "default_bundles",
    "allow_auto_topic_creation": "allow_auto_topic_creation",
    "auto_topic_creation_type": "auto_topic_creation_type",
    "default_num_partitions": "default_num_partitions",
    "non_persistent_inactive": "non_persistent_inactive_s",
    "deduplication_enabled": "deduplication_enabled",
    "deduplication_entries_interval": "deduplication_entries_interval",
    "deduplication_producer_inactivity": "deduplication_producer_inactivity_s",
    "deduplication_max_producers": "deduplication_max_producers",
    "replication_producer_queue_size": "replication_producer_queue_size",
    "managed_ledger_cache_size_mb": "managed_ledger_cache_size_mb",
    "managed_ledger_cache_eviction_watermark": "managed_ledger_cache_eviction_watermark",
    "replicated_subscriptions_enabled": "replicated_subscriptions_enabled",
    "replicated_subscriptions_snapshot_frequency": "replicated_subscriptions_snapshot_frequency_s",
    "replicated_subscriptions_snapshot_timeout": "replicated_subscriptions_snapshot_timeout_s",
    "replicated_subscriptions_snapshot_max_cached": "replicated_subscriptions_snapshot_max_cached",
    "force_delete_tenant_allowed": "force_delete_tenant_allowed",
    "force_delete_namespace_allowed": "force_delete_namespace_allowed",
    "transaction_coordinator_enabled": "transaction_coordinator_enabled",
    "compaction_threshold": "compaction_threshold_bytes",
    "backlog_quota_check_enabled": "backlog_quota_check_enabled",
    "backlog_quota_check_interval": "backlog_quota_check_interval_s",
    "backlog_quota_default_limit_bytes": "backlog_quota_default_limit_bytes",
    "backlog_quota_default_limit_gb": "backlog_quota_default_limit_gb",
    "backlog_quota_default_limit_second": "backlog_quota_default_limit_s",
    "backlog_quota_default_retention_policy": "backlog_quota_default_policy",
    "min_racks_per_write_quorum": "bookkeeper_min_racks_per_write_quorum",
    "enforce_min_racks_per_write_quorum": "bookkeeper_enforce_min_racks",
    "expose_topic_level_metrics_in_prometheus": "expose_topic_level_metrics",
    "expose_consumer_level_metrics_in_prometheus": "expose_consumer_level_metrics",
    "precise_dispatcher_flow_control": "precise_dispatcher_flow_control",
}
"""Parsed flag (its ``dest``) -> BrokerConfig field."""

_MANAGED_LEDGER_FLAGS = {
    "ensemble_size": "ensemble_size",
    "write_quorum": "write_quorum",
    "ack_quorum": "ack_quorum",
    "max_entries_per_ledger": "max_entries_per_ledger",
    "max_ledger_bytes": "max_ledger_bytes",
    "max_ledger_age": "max_ledger_age_s",
    "min_ledger_age": "min_ledger_age_s",
    "offload_threshold_bytes": "offload_threshold_bytes",
    "offload_threshold_seconds": "offload_threshold_s",
    "offload_deletion_lag_ms": "offload_deletion_lag_ms",
}
"""Parsed flag -> ManagedLedgerConfig field."""


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    """The broker settings of ``magnetar broker`` or ``magnetar standalone``: the flags the
    command has (the standalone takes fewer), the defaults for the others."""
    given = vars(args)

    def fields(flags: dict[str, str]) -> dict[str, Any]:
        return {name: given[dest] for dest, name in flags.items() if dest in given}

    return BrokerConfig(
        bookkeeper_tls=bookkeeper_tls(args),
        metadata_tls=metadata_tls(args),
        **fields(_BROKER_FLAGS),
        managed_ledger=ManagedLedgerConfig(**fields(_MANAGED_LEDGER_FLAGS)),
        offload=offload_config(args),
        security=security_config(args),
    )


_SECURITY_FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    # (flag, its broker.conf key, parser, help); every default is SecurityConfig's
    ("--tls-certificate-file", "tlsCertificateFilePath", str, "PEM certificate chain"),
    ("--tls-key-file", "tlsKeyFilePath", str, "PEM private key"),
    ("--tls-trust-certs-file", "tlsTrustCertsFilePath", str, "PEM CAs client certs chain to"),
    ("--tls-allow-insecure-connection", "tlsAllowInsecureConnection", conffile.parse_bool, ""),
    (
        "--tls-require-trusted-client-cert-on-connect",
        "tlsRequireTrustedClientCertOnConnect",
        conffile.parse_bool,
        "refuse TLS clients without a trusted certificate",
    ),
    ("--tls-protocols", "tlsProtocols", tls.parse_protocols, "e.g. TLSv1.3,TLSv1.2"),
    ("--tls-ciphers", "tlsCiphers", tls.parse_ciphers, "OpenSSL cipher names"),
    ("--tls-cert-refresh-check", "tlsCertRefreshCheckDurationSec", float, "seconds"),
    ("--authentication-enabled", "authenticationEnabled", conffile.parse_bool, ""),
    (
        "--authentication-providers",
        "authenticationProviders",
        conffile.authentication_providers,
        "Pulsar's provider class names or tls,token,basic",
    ),
    ("--authentication-refresh-check", "authenticationRefreshCheckSeconds", float, "seconds"),
    ("--token-secret-key", "tokenSecretKey", str, "file:///path, data:..., path or base64"),
    ("--token-public-key", "tokenPublicKey", str, "file:///path, data:..., path or base64"),
    ("--token-auth-claim", "tokenAuthClaim", str, "the claim holding the role (sub)"),
    ("--token-audience-claim", "tokenAudienceClaim", str, ""),
    ("--token-audience", "tokenAudience", str, ""),
    ("--token-allowed-clock-skew", "tokenAllowedClockSkewSeconds", float, "seconds"),
    ("--basic-auth-conf", "basicAuthConf", str, "htpasswd file (file://, data:, path)"),
    ("--anonymous-user-role", "anonymousUserRole", str, "role of clients without credentials"),
    ("--authorization-enabled", "authorizationEnabled", conffile.parse_bool, ""),
    ("--super-user-roles", "superUserRoles", conffile.csv, "comma-separated"),
    ("--proxy-roles", "proxyRoles", conffile.csv, "comma-separated"),
    (
        "--authenticate-metrics-endpoint",
        "authenticateMetricsEndpoint",
        conffile.parse_bool,
        "/metrics needs credentials too",
    ),
    (
        "--broker-client-authentication-plugin",
        "brokerClientAuthenticationPlugin",
        str,
        "how this broker authenticates to the others",
    ),
    ("--broker-client-authentication-parameters", "brokerClientAuthenticationParameters", str, ""),
    ("--broker-client-tls-enabled", "brokerClientTlsEnabled", conffile.parse_bool, ""),
    ("--broker-client-trust-certs-file", "brokerClientTrustCertsFilePath", str, ""),
    ("--broker-client-certificate-file", "brokerClientCertificateFilePath", str, ""),
    ("--broker-client-key-file", "brokerClientKeyFilePath", str, ""),
    (
        "--tls-hostname-verification-enabled",
        "tlsHostnameVerificationEnabled",
        conffile.parse_bool,
        "check other brokers' certificate names",
    ),
)


def _security(p: argparse.ArgumentParser) -> None:
    """TLS listeners, authentication and authorization (docs/security.md)."""
    p.add_argument(
        "--broker-service-port-tls",
        dest="tls_port",
        type=int,
        default=None,
        help="pulsar+ssl:// port (brokerServicePortTls)",
    )
    p.add_argument(
        "--web-service-port-tls",
        dest="https_port",
        type=int,
        default=None,
        help="HTTPS port of the admin API, lookup and /metrics (webServicePortTls)",
    )
    for flag, key, parse, help_text in _SECURITY_FLAGS:
        p.add_argument(flag, type=parse, default=None, help=f"{help_text} ({key})".lstrip())


def _proxy_security(p: argparse.ArgumentParser) -> None:
    """The proxy's TLS listeners, client authentication and its TLS and credentials towards
    the brokers: the broker's security flags less the broker-only ones, and the proxy's own
    (docs/security.md, "The proxy")."""
    p.add_argument(
        "--service-port-tls", dest="tls_port", type=int, help="pulsar+ssl:// port (servicePortTls)"
    )
    p.add_argument(
        "--web-service-port-tls", dest="https_port", type=int, help="HTTPS (webServicePortTls)"
    )
    for flag, key, parse, help_text in _SECURITY_FLAGS:
        if key not in conffile.PROXY_SECURITY_LEFT_OUT:
            p.add_argument(flag, type=parse, default=None, help=f"{help_text} ({key})".lstrip())
    _bool_option(
        p, "--tls-enabled-with-broker", False, "pulsar+ssl/HTTPS to brokers (tlsEnabledWithBroker)"
    )
    _bool_option(
        p,
        "--forward-authorization-credentials",
        False,
        "pass clients' credentials to brokers (forwardAuthorizationCredentials)",
    )
    p.add_argument("--broker-service-url-tls", help="pulsar+ssl://host:port (brokerServiceURLTLS)")
    p.add_argument(
        "--broker-web-service-url-tls", help="https://host:port (brokerWebServiceURLTLS)"
    )


def security_config(args: argparse.Namespace) -> SecurityConfig:
    """The SecurityConfig the security flags (or their broker.conf keys) give."""
    given = {dest: value for dest, value in vars(args).items() if value is not None}
    base = SecurityConfig()
    tls_settings = tls.TlsSettings(
        certificate=given.get("tls_certificate_file"),
        key=given.get("tls_key_file"),
        trust=given.get("tls_trust_certs_file"),
        allow_insecure=given.get("tls_allow_insecure_connection", False),
        require_client_cert=given.get("tls_require_trusted_client_cert_on_connect", False),
        protocols=given.get("tls_protocols", ()),
        ciphers=given.get("tls_ciphers", ()),
    )
    return SecurityConfig(
        authentication_enabled=given.get("authentication_enabled", False),
        providers=given.get("authentication_providers", ()),
        token_secret_key=given.get("token_secret_key"),
        token_public_key=given.get("token_public_key"),
        token_auth_claim=given.get("token_auth_claim", base.token_auth_claim),
        token_audience_claim=given.get("token_audience_claim"),
        token_audience=given.get("token_audience"),
        token_clock_skew_s=given.get("token_allowed_clock_skew", 0.0),
        basic_auth_conf=given.get("basic_auth_conf"),
        anonymous_role=given.get("anonymous_user_role"),
        refresh_check_s=given.get("authentication_refresh_check", base.refresh_check_s),
        authorization_enabled=given.get("authorization_enabled", False),
        super_users=given.get("super_user_roles", ()),
        proxy_roles=given.get("proxy_roles", ()),
        authenticate_metrics=given.get("authenticate_metrics_endpoint", False),
        tls=tls_settings,
        tls_refresh_s=given.get("tls_cert_refresh_check", base.tls_refresh_s),
        broker_client_auth_plugin=given.get("broker_client_authentication_plugin"),
        broker_client_auth_params=given.get("broker_client_authentication_parameters", ""),
        broker_client_tls=given.get("broker_client_tls_enabled", False),
        broker_client_trust_certs=given.get("broker_client_trust_certs_file"),
        broker_client_certificate=given.get("broker_client_certificate_file"),
        broker_client_key=given.get("broker_client_key_file"),
        tls_hostname_verification=given.get("tls_hostname_verification_enabled", False),
    )


def _bookie(args: argparse.Namespace) -> int:
    from magnetar.bookie import identity, server
    from magnetar.common import aio, logs

    logs.setup(args.log_level)
    overrides: dict[str, object] = {}
    if args.journal_group_wait_ms is not None:
        overrides["journal_max_group_wait_ms"] = args.journal_group_wait_ms
    if args.flush_interval is not None:
        overrides["flush_interval_s"] = args.flush_interval
    if args.gc_interval is not None:
        overrides["gc_interval_s"] = args.gc_interval
    if args.disk_usage_threshold is not None:
        overrides["disk_usage_threshold"] = args.disk_usage_threshold
        overrides["disk_usage_lwm"] = min(args.disk_usage_threshold, 0.90)
    try:
        options = server.BookieOptions(
            data_dir=Path(args.data_dir),
            journal_dir=Path(args.journal_dir) if args.journal_dir else None,
            port=args.port,
            http_port=args.http_port,
            bind_address=args.bind_address,
            advertised_address=args.advertised_address,
            rack=args.rack,
            session_ttl=args.session_ttl,
            storage_overrides=overrides,
            tls=bookie_tls(args),
            tls_client_authentication=args.tls_client_authentication,
            tls_check_interval=args.tls_cert_refresh_check,
            metadata_tls=metadata_tls(args),
        )
        if args.autorecovery:
            if options.tls is not None:
                raise ValueError(
                    "--autorecovery (autoRecoveryDaemonEnabled) in a TLS bookie: run "
                    "`magnetar autorecovery` with the --bookkeeper-tls-* flags instead"
                )
            aio.run(_bookie_with_autorecovery(args, options))
        else:
            aio.run(server.run(args.metadata_url, options))
    except identity.IdentityError as err:
        print(f"magnetar bookie: refusing to start: {err}", file=sys.stderr)
        return 3
    except ValueError as err:
        print(f"magnetar bookie: {err}", file=sys.stderr)
        return 2
    except metadata_api.StoreUnavailableError as err:
        print(f"magnetar bookie: cannot reach the metadata store: {err}", file=sys.stderr)
        return 1
    return 0


def _autorecovery_options(args: argparse.Namespace) -> Any:
    from magnetar.autorecovery.auditor import AuditorOptions
    from magnetar.autorecovery.daemon import AutorecoveryOptions
    from magnetar.autorecovery.worker import WorkerOptions

    for flag in ("lost_bookie_recovery_delay", "audit_interval", "open_ledger_grace"):
        if getattr(args, flag) < 0:
            raise ValueError(f"--{flag.replace('_', '-')} must not be negative")
    if args.periodic_check_interval < 0:
        raise ValueError("--periodic-check-interval must not be negative (0: off)")
    return AutorecoveryOptions(
        auditor=AuditorOptions(
            lost_bookie_recovery_delay=args.lost_bookie_recovery_delay,
            audit_interval=args.audit_interval,
            periodic_check_interval=args.periodic_check_interval,
            session_ttl=args.session_ttl,
        ),
        worker=WorkerOptions(
            open_ledger_grace=args.open_ledger_grace,
            session_ttl=args.session_ttl,
            rate_bytes=args.replication_rate_by_bytes,
        ),
        min_racks_per_write_quorum=args.min_racks_per_write_quorum,
        enforce_min_racks=args.enforce_min_racks_per_write_quorum,
    )


async def _bookie_with_autorecovery(args: argparse.Namespace, options: Any) -> None:
    """A bookie with the autorecovery daemon in its process (autoRecoveryDaemonEnabled)."""
    from magnetar.autorecovery import metrics as recovery_metrics
    from magnetar.autorecovery.daemon import Autorecovery
    from magnetar.bookie import metrics as bookie_metrics
    from magnetar.bookie import server
    from magnetar.metadata import open_store

    store = await open_store(args.metadata_url, tls=metadata_tls(args))
    recovery = Autorecovery(store, _autorecovery_options(args))
    for collector in recovery_metrics.COLLECTORS:
        with contextlib.suppress(ValueError):
            bookie_metrics.REGISTRY.register(collector)
    ready = asyncio.Event()
    bookie = asyncio.create_task(server.run(args.metadata_url, options, ready=ready))
    waiting = asyncio.create_task(ready.wait())
    try:
        await asyncio.wait([bookie, waiting], return_when=asyncio.FIRST_COMPLETED)
        if not bookie.done():
            recovery.start()
        await bookie
    finally:
        waiting.cancel()
        await recovery.stop()
        await store.close()


def _autorecovery(args: argparse.Namespace) -> int:
    from magnetar.autorecovery import daemon
    from magnetar.common import aio, logs

    logs.setup(args.log_level)
    try:
        aio.run(
            daemon.run(
                args.metadata_url,
                _autorecovery_options(args),
                http_port=args.http_port,
                bind_address=args.bind_address,
                metadata_tls=metadata_tls(args),
                bookie_tls=bookkeeper_tls(args),
            )
        )
    except ValueError as err:
        print(f"magnetar autorecovery: {err}", file=sys.stderr)
        return 2
    except metadata_api.StoreUnavailableError as err:
        print(f"magnetar autorecovery: cannot reach the metadata store: {err}", file=sys.stderr)
        return 1
    return 0


def _autorecovery_flags(p: argparse.ArgumentParser) -> None:
    """The auditor's and the recovery worker's settings (bookkeeper.conf's names)."""
    p.add_argument(
        "--lost-bookie-recovery-delay",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="lostBookieRecoveryDelay: how long a bookie may be gone before its "
        "ledgers are re-replicated",
    )
    p.add_argument(
        "--audit-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="seconds between audits",
    )
    p.add_argument(
        "--periodic-check-interval",
        type=float,
        default=604800.0,
        metavar="SECONDS",
        help="auditorPeriodicCheckInterval: check that closed ledgers' entries are on their "
        "bookies (0: never)",
    )
    p.add_argument(
        "--open-ledger-grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="openLedgerRereplicationGracePeriod: then an open ledger is fenced and recovered",
    )
    p.add_argument(
        "--replication-rate-by-bytes",
        type=int,
        default=-1,
        metavar="BYTES",
        help="replicationRateByBytes: bytes a recovery worker copies per second, at most "
        "(-1: no limit)",
    )
    p.add_argument(
        "--min-racks-per-write-quorum",
        type=int,
        default=1,
        help="minNumRacksPerWriteQuorum for replacement bookies",
    )
    _bool_option(
        p,
        "--enforce-min-racks-per-write-quorum",
        False,
        "enforceMinNumRacksPerWriteQuorum: refuse a replacement that breaks the rack rule",
    )


def _proxy(args: argparse.Namespace) -> int:
    from magnetar.common import aio, logs
    from magnetar.proxy import server
    from magnetar.proxy.config import ProxyConfig

    logs.setup(args.log_level)
    try:
        config = ProxyConfig(
            bind_address=args.bind_address,
            port=args.port,
            http_port=args.http_port,
            tls_port=args.tls_port,
            https_port=args.https_port,
            metadata_url=args.metadata_url,
            metadata_tls=metadata_tls(args),
            broker_service_url=args.broker_service_url,
            broker_web_service_url=args.broker_web_service_url,
            broker_service_url_tls=args.broker_service_url_tls,
            broker_web_service_url_tls=args.broker_web_service_url_tls,
            tls_enabled_with_broker=args.tls_enabled_with_broker,
            forward_authorization_credentials=args.forward_authorization_credentials,
            security=security_config(args),
            max_message_size=args.max_message_size,
            max_concurrent_inbound_connections=args.max_concurrent_inbound_connections,
            max_concurrent_inbound_connections_per_ip=(
                args.max_concurrent_inbound_connections_per_ip
            ),
        )
        aio.run(server.run(config))
    except (ValueError, OSError) as err:
        print(f"magnetar proxy: {err}", file=sys.stderr)
        return 2
    return 0


def _admin(args: argparse.Namespace) -> int:
    from magnetar import admin_cli

    return admin_cli.run(args)


def _tokens(args: argparse.Namespace) -> int:
    from magnetar import tokens_cli

    return tokens_cli.run(args)


def _argument(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A configuration parser as an argparse type: its ValueError's message is the CLI's
    (argparse would print only "invalid value")."""

    def parse_argument(text: str) -> T:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse_argument.__name__ = parse.__name__
    return parse_argument


def _config(p: argparse.ArgumentParser, example: str) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help=f"a {example} with Pulsar's key names (docs/configuration.md); flags override it",
    )


def _bool_option(
    p: argparse.ArgumentParser, flag: str, default: bool, help_text: str | None = None
) -> None:
    """A ``true|false`` option, parsed as its broker.conf key is (conffile.parse_bool)."""
    p.add_argument(
        flag, type=conffile.parse_bool, default=default, metavar="true|false", help=help_text
    )


def _entry_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--managed-ledger-cache-size-mb",
        type=_argument(conffile.non_negative_int),
        default=_BC.managed_ledger_cache_size_mb,
        metavar="MB",
        help="the entry cache budget all topics share (0: none; default: a fifth of the "
        "memory the broker may use, 64 to 1024)",
    )
    p.add_argument(
        "--managed-ledger-cache-eviction-watermark",
        type=_argument(conffile.fraction),
        default=_BC.managed_ledger_cache_eviction_watermark,
        help="a full entry cache is brought down to this fraction of its budget",
    )


def _replicated_subscriptions(p: argparse.ArgumentParser) -> None:
    """Replicated subscriptions (docs/geo-replication.md): a broker and a standalone alike."""
    _bool_option(
        p,
        "--replicated-subscriptions-enabled",
        _BC.replicated_subscriptions_enabled,
        "carry replicated subscriptions' positions to the other clusters",
    )
    p.add_argument(
        "--replication-producer-queue-size",
        type=_argument(conffile.positive_int),
        default=_BC.replication_producer_queue_size,
        help="entries a replicator keeps in flight to a remote cluster before it waits "
        "for receipts",
    )
    p.add_argument(
        "--replicated-subscriptions-snapshot-frequency",
        type=float,
        default=_BC.replicated_subscriptions_snapshot_frequency_s,
        help="seconds between snapshots of a topic's positions on the other clusters",
    )
    p.add_argument(
        "--replicated-subscriptions-snapshot-timeout",
        type=float,
        default=_BC.replicated_subscriptions_snapshot_timeout_s,
        help="seconds after which a snapshot the other clusters did not answer is abandoned",
    )
    p.add_argument(
        "--replicated-subscriptions-snapshot-max-cached",
        type=int,
        default=_BC.replicated_subscriptions_snapshot_max_cached,
        help="completed snapshots kept per topic",
    )


def _deduplication(p: argparse.ArgumentParser) -> None:
    """The deduplication defaults a broker and a standalone share."""
    _bool_option(
        p,
        "--deduplication-enabled",
        _BC.deduplication_enabled,
        "default when neither namespace nor topic sets it",
    )
    p.add_argument(
        "--deduplication-entries-interval",
        type=int,
        default=_BC.deduplication_entries_interval,
        help="a snapshot of the producers' sequence ids every this many entries",
    )
    p.add_argument(
        "--compaction-threshold",
        type=int,
        default=_BC.compaction_threshold_bytes,
        help="compact a topic once this many bytes were stored since its last compaction, "
        "unless its namespace or topic sets compactionThreshold (0: never)",
    )


def _backlog_quota(p: argparse.ArgumentParser) -> None:
    """The backlog quota defaults and check a broker and a standalone share
    (magnetar.broker.backlog_quota)."""
    _bool_option(
        p,
        "--backlog-quota-check-enabled",
        _BC.backlog_quota_check_enabled,
        "check backlog quotas periodically (evict, or disconnect producers over a quota)",
    )
    p.add_argument(
        "--backlog-quota-check-interval",
        type=float,
        default=_BC.backlog_quota_check_interval_s,
        metavar="SECONDS",
        help="how often each topic's backlog quotas are checked",
    )
    p.add_argument(
        "--backlog-quota-default-limit-bytes",
        type=int,
        default=_BC.backlog_quota_default_limit_bytes,
        help="backlog size limit of topics whose namespace and topic set none (-1: none)",
    )
    p.add_argument(
        "--backlog-quota-default-limit-gb",
        type=float,
        default=_BC.backlog_quota_default_limit_gb,
        help="the same in GiB; when positive it wins over the limit in bytes (-1: none)",
    )
    p.add_argument(
        "--backlog-quota-default-limit-second",
        type=int,
        default=_BC.backlog_quota_default_limit_s,
        help="default age limit of the oldest unacknowledged message (0 or less: none)",
    )
    p.add_argument(
        "--backlog-quota-default-retention-policy",
        choices=("producer_request_hold", "producer_exception", "consumer_backlog_eviction"),
        default=_BC.backlog_quota_default_policy,
        help="what the default quotas (and quotas set without a policy) do when exceeded",
    )


def _force_delete(p: argparse.ArgumentParser) -> None:
    """Pulsar's forceDeleteTenantAllowed / forceDeleteNamespaceAllowed (both off by default)."""
    _bool_option(
        p,
        "--force-delete-tenant-allowed",
        _BC.force_delete_tenant_allowed,
        "allow DELETE of a tenant with force=true (deletes its namespaces and topics)",
    )
    _bool_option(
        p,
        "--force-delete-namespace-allowed",
        _BC.force_delete_namespace_allowed,
        "allow DELETE of a namespace with force=true (deletes its topics)",
    )
    _bool_option(
        p,
        "--transaction-coordinator-enabled",
        _BC.transaction_coordinator_enabled,
        "serve transactions (Pulsar's transactionCoordinatorEnabled)",
    )


def _metrics_options(p: argparse.ArgumentParser) -> None:
    """Pulsar's switches of the /metrics series per topic and per consumer."""
    _bool_option(
        p,
        "--expose-topic-level-metrics-in-prometheus",
        _BC.expose_topic_level_metrics,
        "series per topic and subscription on /metrics (off: summed per namespace)",
    )
    _bool_option(
        p,
        "--expose-consumer-level-metrics-in-prometheus",
        _BC.expose_consumer_level_metrics,
        "pulsar_consumer_* series per consumer on /metrics",
    )


def _dispatch_options(p: argparse.ArgumentParser) -> None:
    """Pulsar's dispatcher switches."""
    _bool_option(
        p,
        "--precise-dispatcher-flow-control",
        _BC.precise_dispatcher_flow_control,
        "Exclusive/Failover: read permits / messages per entry, never past the permits",
    )


_OFFLOAD_FLAGS = (
    # (flag, broker.conf key, help)
    ("--offload-driver", "managedLedgerOffloadDriver", "aws-s3 or S3 (S3-compatible); unset: off"),
    ("--offload-bucket", "s3ManagedLedgerOffloadBucket", "the (existing) bucket"),
    ("--offload-region", "s3ManagedLedgerOffloadRegion", "default us-east-1"),
    ("--offload-endpoint", "s3ManagedLedgerOffloadServiceEndpoint", "e.g. http://minio:9000"),
    ("--offload-path-style", "magnetarOffloadPathStyle", "true for MinIO (path-style URLs)"),
    ("--offload-block-size", "s3ManagedLedgerOffloadMaxBlockSizeInBytes", "bytes per block"),
    ("--offload-read-cache-bytes", "magnetarOffloadReadCacheBytes", "block cache bound"),
    ("--offload-key-prefix", "magnetarOffloadKeyPrefix", "prepended to every object key"),
    ("--offload-credentials-file", "magnetarOffloadCredentialsFile", "AWS credentials (INI)"),
    ("--offload-credentials-profile", "magnetarOffloadCredentialsProfile", "its section"),
    ("--offload-connect-timeout-ms", "magnetarOffloadConnectTimeoutMs", "per S3 request"),
    ("--offload-read-timeout-ms", "magnetarOffloadReadTimeoutMs", "per S3 request"),
    ("--offload-max-attempts", "magnetarOffloadMaxAttempts", "tries per S3 request"),
)


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _offload(p: argparse.ArgumentParser) -> None:
    """Tiered storage (docs/offload.md); credentials also come from AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY (boto3's standard chain)."""
    for flag, _key, help_text in _OFFLOAD_FLAGS:
        p.add_argument(flag, default=None, help=help_text)
    p.add_argument(
        "--offload-threshold-bytes",
        type=int,
        default=_ML.offload_threshold_bytes,
        help="bytes kept on bookies before older ledgers are offloaded (-1: never)",
    )
    p.add_argument(
        "--offload-threshold-seconds",
        type=int,
        default=_ML.offload_threshold_s,
        help="closed ledgers older than this are offloaded (-1: never)",
    )
    p.add_argument(
        "--offload-deletion-lag-ms",
        type=int,
        default=_ML.offload_deletion_lag_ms,
        help="delete bookie copies this long after the offload",
    )


def offload_config(args: argparse.Namespace) -> S3Config | None:
    """The S3 configuration the offload flags (or broker.conf keys) give; None without a
    driver. Raises ValueError (OffloadConfigError) naming a bad setting."""
    props = {
        key: str(getattr(args, _dest(flag)))
        for flag, key, _ in _OFFLOAD_FLAGS
        if getattr(args, _dest(flag), None) not in (None, "")
    }
    if "managedLedgerOffloadDriver" not in props:
        if len(props) > 0:
            raise ValueError(
                f"{', '.join(sorted(props))} set but managedLedgerOffloadDriver "
                "(--offload-driver) is not: offload stays off"
            )
        return None
    return S3Config.from_properties(props)


def _non_persistent_inactive(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--non-persistent-inactive",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="drop a non-persistent topic this long without producers and consumers (0: never)",
    )


# --- internal hops over TLS (docs/security.md, "Internal hops: bookies and etcd") -----------


def _path(value: object) -> Path | None:
    return Path(str(value)) if value not in (None, "") else None


def _metadata_tls_flags(p: argparse.ArgumentParser) -> None:
    """TLS to etcd: Pulsar's etcd settings file and flags that override its entries."""
    p.add_argument(
        "--metadata-config-path",
        metavar="FILE",
        help="Pulsar's etcd settings file (useTls, tlsTrustCertsFilePath, "
        "tlsCertificateFilePath, tlsKeyFilePath, authority)",
    )
    p.add_argument("--metadata-tls-trust-certs-file", metavar="PEM", help="CAs etcd's cert is from")
    p.add_argument(
        "--metadata-tls-certificate-file", metavar="PEM", help="client certificate for etcd"
    )
    p.add_argument("--metadata-tls-key-file", metavar="PEM", help="its private key")
    p.add_argument("--metadata-tls-authority", help="name etcd's certificate is checked against")


def metadata_tls(args: argparse.Namespace) -> grpctls.ClientTlsConfig | None:
    """TLS to etcd from ``--metadata-config-path`` (Pulsar's etcd settings file) and the
    ``--metadata-tls-*`` flags (which override the file): None when neither asks for TLS
    (``https://`` endpoints in the metadata URL still do). Raises ValueError naming a bad
    setting."""
    settings: dict[str, object] = {}
    config_path = getattr(args, "metadata_config_path", None)
    if config_path:
        settings = conffile.metadata_store_config(Path(config_path))
    for dest, flag in (
        ("trust_certs_file", "metadata_tls_trust_certs_file"),
        ("cert_file", "metadata_tls_certificate_file"),
        ("key_file", "metadata_tls_key_file"),
        ("authority", "metadata_tls_authority"),
    ):
        value = getattr(args, flag, None)
        if value:
            settings[dest] = value
    files = tlsfiles.TlsFiles(
        cert_file=_path(settings.get("cert_file")),
        key_file=_path(settings.get("key_file")),
        trust_file=_path(settings.get("trust_certs_file")),
    )
    use_tls = settings.get("use_tls")
    if use_tls is False:
        if files.paths():
            raise ValueError(f"{config_path}: useTls is false but TLS files are set")
        return None
    if use_tls is None and not files.paths():
        return None
    authority = settings.get("authority")
    return grpctls.ClientTlsConfig(files=files, authority=str(authority) if authority else None)


def _bookkeeper_tls_flags(p: argparse.ArgumentParser) -> None:
    """The broker's channels to bookies over TLS (broker.conf's bookkeeperTLS* keys)."""
    p.add_argument("--bookkeeper-tls-trust-certs-file", metavar="PEM", help="CAs of bookie certs")
    p.add_argument(
        "--bookkeeper-tls-certificate-file", metavar="PEM", help="client cert for bookies"
    )
    p.add_argument("--bookkeeper-tls-key-file", metavar="PEM", help="its private key")
    _bool_option(
        p,
        "--bookkeeper-tls-client-authentication",
        False,
        "speak TLS to bookies presenting the client certificate (bookies that require one)",
    )
    p.add_argument(
        "--bookkeeper-tls-cert-refresh-check",
        type=float,
        default=tlsfiles.DEFAULT_CHECK_INTERVAL,
        metavar="SECONDS",
        help="how often the certificate files are checked for a rotation",
    )


def bookkeeper_tls(args: argparse.Namespace) -> grpctls.ClientTlsConfig | None:
    """TLS to bookies: on when ``--bookkeeper-tls-client-authentication`` (which needs the client
    certificate and key) or any bookkeeper TLS file is given; None (plaintext) otherwise."""
    given = vars(args)
    files = tlsfiles.TlsFiles(
        cert_file=_path(given.get("bookkeeper_tls_certificate_file")),
        key_file=_path(given.get("bookkeeper_tls_key_file")),
        trust_file=_path(given.get("bookkeeper_tls_trust_certs_file")),
    )
    client_auth = bool(given.get("bookkeeper_tls_client_authentication", False))
    if client_auth and not files.has_identity:
        raise ValueError(
            "bookkeeperTLSClientAuthentication (--bookkeeper-tls-client-authentication) needs "
            "bookkeeperTLSCertificateFilePath and bookkeeperTLSKeyFilePath"
        )
    if not client_auth and not files.paths():
        return None
    interval = float(
        given.get("bookkeeper_tls_cert_refresh_check", tlsfiles.DEFAULT_CHECK_INTERVAL)
    )
    if not interval > 0:
        raise ValueError("--bookkeeper-tls-cert-refresh-check must be positive")
    return grpctls.ClientTlsConfig(files=files, check_interval=interval)


def _bookie_tls_flags(p: argparse.ArgumentParser) -> None:
    """The bookie's gRPC port over TLS (bookkeeper.conf's tls* keys)."""
    p.add_argument(
        "--tls-certificate-file", metavar="PEM", help="the gRPC port's certificate chain"
    )
    p.add_argument("--tls-key-file", metavar="PEM", help="its private key (TLS on with both)")
    p.add_argument("--tls-trust-certs-file", metavar="PEM", help="CAs of client certificates")
    _bool_option(
        p, "--tls-client-authentication", False, "refuse clients without a trusted certificate"
    )
    p.add_argument(
        "--tls-cert-refresh-check",
        type=float,
        default=tlsfiles.DEFAULT_CHECK_INTERVAL,
        metavar="SECONDS",
        help="how often the certificate files are checked for a rotation",
    )
    p.add_argument("--tls-provider-factory", help=argparse.SUPPRESS)


def bookie_tls(args: argparse.Namespace) -> tlsfiles.TlsFiles | None:
    """The bookie's TLS files: None (plaintext) unless a certificate and key are given.
    Raises ValueError naming an inconsistent setting."""
    files = tlsfiles.TlsFiles(
        cert_file=_path(args.tls_certificate_file),
        key_file=_path(args.tls_key_file),
        trust_file=_path(args.tls_trust_certs_file),
    )
    if not files.has_identity:
        if args.tls_provider_factory or args.tls_client_authentication or files.paths():
            raise ValueError(
                "bookie TLS needs tlsCertificatePath and tlsKeyStore "
                "(--tls-certificate-file, --tls-key-file)"
            )
        return None
    if args.tls_client_authentication and files.trust_file is None:
        raise ValueError(
            "tlsClientAuthentication (--tls-client-authentication) needs tlsTrustStore "
            "(--tls-trust-certs-file): the CAs client certificates must chain to"
        )
    if not args.tls_cert_refresh_check > 0:
        raise ValueError("--tls-cert-refresh-check must be positive")
    return files


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser, and the subcommand parsers that take ``--config`` by command name."""
    parser = argparse.ArgumentParser(prog="magnetar", description=__doc__)
    commands: dict[str, argparse.ArgumentParser] = {}
    version = f"magnetar {__version__}, {native.describe()}"
    parser.add_argument("--version", action="version", version=version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("standalone", help="broker + bookie + embedded metadata in one process")
    commands["standalone"] = p
    _config(p, "standalone.conf")
    p.add_argument("--data-dir", default="data/standalone")
    p.add_argument("--port", type=conffile.optional_port, default=6650, help="off: none")
    p.add_argument("--http-port", type=conffile.optional_port, default=8080, help="off: none")
    p.add_argument("--advertised-address", default="127.0.0.1")
    p.add_argument("--bind-address", default="0.0.0.0")
    p.add_argument("--bookie-port", type=int, help="loopback port of the in-process bookie")
    p.add_argument(
        "--cluster-name",
        default="standalone",
        help="this cluster's name (another one's, to replicate with it: docs/geo-replication.md)",
    )
    p.add_argument("--keepalive-interval", type=float, default=30.0, help="ping idle clients")
    p.add_argument(
        "--auto-topic-creation-type",
        choices=["non-partitioned", "partitioned"],
        default="non-partitioned",
        help="what an unknown topic name creates (namespace policies may override)",
    )
    p.add_argument("--default-num-partitions", type=int, default=1)
    p.add_argument(
        "--max-entries-per-ledger",
        type=int,
        default=50_000,
        help="roll a topic's ledger over after this many entries",
    )
    _non_persistent_inactive(p)
    _deduplication(p)
    _entry_cache(p)
    _replicated_subscriptions(p)
    _backlog_quota(p)
    _force_delete(p)
    _metrics_options(p)
    _dispatch_options(p)
    _offload(p)
    _security(p)
    p.add_argument("--log-level", default=None)
    p.set_defaults(func=_standalone)

    p = sub.add_parser("broker", help="a broker of a cluster (bookies and metadata in etcd)")
    commands["broker"] = p
    _config(p, "broker.conf")
    p.add_argument("--metadata-url", help="etcd://host:port[,host:port] (required)")
    p.add_argument(
        "--port", type=conffile.optional_port, default=6650, help="Pulsar protocol (off: none)"
    )
    p.add_argument(
        "--http-port",
        type=conffile.optional_port,
        default=8080,
        help="admin REST, lookup, /metrics (off: none)",
    )
    p.add_argument("--bind-address", default="0.0.0.0")
    p.add_argument("--advertised-address", default="127.0.0.1", help="host clients reach")
    p.add_argument(
        "--advertised-listeners",
        type=_argument(conffile.listeners),
        default=(),
        metavar="NAME:pulsar://HOST:PORT,...",
        help="addresses lookups answer to clients naming a listener (listenerName)",
    )
    p.add_argument(
        "--internal-listener-name",
        help="the listener brokers and clients naming none use (default: the first)",
    )
    p.add_argument("--cluster-name", default="standalone")
    p.add_argument("--ensemble-size", type=int, default=2, help="bookies per ledger (E)")
    p.add_argument("--write-quorum", type=int, default=2, help="copies of each entry (Wq)")
    p.add_argument("--ack-quorum", type=int, default=2, help="copies confirmed before ack (Aq)")
    p.add_argument(
        "--min-racks-per-write-quorum",
        type=int,
        default=_BC.bookkeeper_min_racks_per_write_quorum,
        help="racks each write set should span (bookkeeperClientMinNumRacksPerWriteQuorum)",
    )
    _bool_option(
        p,
        "--enforce-min-racks-per-write-quorum",
        _BC.bookkeeper_enforce_min_racks,
        "refuse ensembles spanning fewer racks (bookkeeperClientEnforceMinNumRacksPerWriteQuorum)",
    )
    p.add_argument("--session-ttl", type=float, default=10.0, help="ownership lease, seconds")
    p.add_argument("--keepalive-interval", type=float, default=_BC.keepalive_interval_s)
    p.add_argument(
        "--auto-topic-creation-type",
        choices=["non-partitioned", "partitioned"],
        default=_BC.auto_topic_creation_type,
    )
    p.add_argument("--default-num-partitions", type=int, default=_BC.default_num_partitions)
    _bool_option(p, "--allow-auto-topic-creation", _BC.allow_auto_topic_creation)
    p.add_argument(
        "--default-bundles",
        type=int,
        default=_BC.default_bundles,
        help="bundles of a namespace the broker creates",
    )
    p.add_argument("--max-message-size", type=int, default=_BC.max_message_size, metavar="BYTES")
    p.add_argument("--max-entries-per-ledger", type=int, default=_ML.max_entries_per_ledger)
    p.add_argument("--max-ledger-bytes", type=int, default=_ML.max_ledger_bytes)
    p.add_argument("--max-ledger-age", type=float, default=_ML.max_ledger_age_s, metavar="SECONDS")
    p.add_argument("--min-ledger-age", type=float, default=_ML.min_ledger_age_s, metavar="SECONDS")
    _deduplication(p)
    _entry_cache(p)
    _replicated_subscriptions(p)
    _backlog_quota(p)
    _force_delete(p)
    _metrics_options(p)
    _dispatch_options(p)
    p.add_argument(
        "--deduplication-max-producers", type=int, default=_BC.deduplication_max_producers
    )
    p.add_argument(
        "--deduplication-producer-inactivity",
        type=float,
        default=_BC.deduplication_producer_inactivity_s,
        metavar="SECONDS",
    )
    _non_persistent_inactive(p)
    _offload(p)
    _security(p)
    p.add_argument(
        "--functions-runtime",
        choices=["none", "kubernetes"],
        default="none",
        help="where function instances run: none (not on this broker), kubernetes (a "
        "Function resource per function in the pod's namespace; docs/functions.md)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="broker processes sharing the ports, one per core given (default 1)",
    )
    # set by the parent of workers (broker/workers.py)
    p.add_argument("--worker-of", help=argparse.SUPPRESS)
    p.add_argument("--worker-slot", help=argparse.SUPPRESS)
    p.add_argument("--worker-dir", help=argparse.SUPPRESS)
    p.add_argument("--log-level", default=None)
    p.set_defaults(func=_broker)
    _metadata_tls_flags(p)
    _bookkeeper_tls_flags(p)

    p = sub.add_parser("bookie", help="a storage node: journal + entry logs + index, over gRPC")
    commands["bookie"] = p
    _config(p, "bookkeeper.conf")
    p.add_argument("--metadata-url", help="etcd://host:port[,host:port] (required)")
    p.add_argument("--data-dir", help="entry logs and index (and the journal) (required)")
    p.add_argument("--journal-dir", help="journal on its own (fast) disk; default DATA_DIR/journal")
    p.add_argument("--port", type=int, default=3181, help="gRPC port")
    p.add_argument("--http-port", type=int, default=8000, help="/metrics and /health")
    p.add_argument("--bind-address", default="0.0.0.0")
    p.add_argument("--advertised-address", default="127.0.0.1", help="host part of the bookie id")
    p.add_argument("--rack", default="/default-rack")
    p.add_argument("--session-ttl", type=float, default=10.0, help="registration lease, seconds")
    p.add_argument("--journal-group-wait-ms", type=float, help="group commit max wait")
    p.add_argument("--flush-interval", type=float, help="write cache flush period, seconds")
    p.add_argument("--gc-interval", type=float, help="garbage collection period, seconds")
    p.add_argument("--disk-usage-threshold", type=float, help="go read-only above this fraction")
    p.add_argument("--log-level", default=None)
    _bool_option(
        p,
        "--autorecovery",
        False,
        "autoRecoveryDaemonEnabled: run an auditor candidate and a recovery worker in-process",
    )
    _autorecovery_flags(p)
    p.set_defaults(func=_bookie)
    _metadata_tls_flags(p)
    _bookie_tls_flags(p)

    p = sub.add_parser(
        "autorecovery", help="auditor candidate + recovery worker: re-replicates lost copies"
    )
    commands["autorecovery"] = p
    _config(p, "bookkeeper.conf")
    p.add_argument("--metadata-url", help="etcd://host:port[,host:port] (required)")
    p.add_argument("--http-port", type=int, default=8001, help="/metrics and /health")
    p.add_argument("--bind-address", default="0.0.0.0")
    p.add_argument(
        "--session-ttl", type=float, default=10.0, help="auditor and claim leases, seconds"
    )
    p.add_argument("--log-level", default=None)
    _autorecovery_flags(p)
    p.set_defaults(func=_autorecovery)
    _metadata_tls_flags(p)
    _bookkeeper_tls_flags(p)

    p = sub.add_parser(
        "proxy", help="one entry point for clients and admin in front of the brokers"
    )
    commands["proxy"] = p
    _config(p, "proxy.conf")
    p.add_argument("--metadata-url", help="etcd://host:port[,...]: the brokers registered there")
    p.add_argument("--broker-service-url", help="or one fixed broker address, pulsar://host:port")
    p.add_argument("--broker-web-service-url", help="its admin address, http://host:port")
    p.add_argument(
        "--port", type=conffile.optional_port, default=6650, help="Pulsar protocol (off: none)"
    )
    p.add_argument(
        "--http-port", type=conffile.optional_port, default=8080, help="admin API (off: none)"
    )
    p.add_argument("--bind-address", default="0.0.0.0")
    p.add_argument("--max-message-size", type=int, default=_BC.max_message_size, metavar="BYTES")
    p.add_argument(
        "--max-concurrent-inbound-connections",
        type=int,
        default=10000,
        metavar="N",
        help="client connections open at once, more are refused (0: no limit)",
    )
    p.add_argument(
        "--max-concurrent-inbound-connections-per-ip",
        type=int,
        default=0,
        metavar="N",
        help="client connections open at once from one address (0: no limit)",
    )
    p.add_argument("--log-level", default=None)
    p.set_defaults(func=_proxy)
    _proxy_security(p)
    _metadata_tls_flags(p)

    from magnetar import admin_cli, tokens_cli

    p = sub.add_parser("admin", help="manage tenants, namespaces and topics (admin REST API)")
    admin_cli.build_parser(p)
    p.set_defaults(func=_admin)
    p = sub.add_parser("tokens", help="keys and tokens for token authentication")
    tokens_cli.build_parser(p)
    p.set_defaults(func=_tokens)
    return parser, commands


_REQUIRED = {
    "broker": (("metadata_url", "--metadata-url", "metadataStoreUrl"),),
    "autorecovery": (("metadata_url", "--metadata-url", "metadataServiceUri"),),
    "bookie": (
        ("metadata_url", "--metadata-url", "metadataServiceUri"),
        ("data_dir", "--data-dir", "ledgerDirectories"),
    ),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv``; with ``--config FILE``, the file's values become the subcommand's
    defaults and the command line is parsed again, so flags override the file. A file
    Magnetar refuses (unknown key, bad value) exits with status 2 and a message naming it."""
    parser, commands = _build()
    args = parser.parse_args(argv)
    config = getattr(args, "config", None)
    if config:
        try:
            values = conffile.load(
                Path(config), conffile.TABLES[args.command], conffile.KNOWN[args.command]
            )
        except conffile.ConfigError as err:
            print(f"magnetar {args.command}: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        commands[args.command].set_defaults(**values)
        args = parser.parse_args(argv)
    for dest, flag, key in _REQUIRED.get(args.command, ()):
        if not getattr(args, dest, None):
            commands[args.command].error(f"{flag} (or {key} in --config FILE) is required")
    if args.command in _METADATA_URL_FORMS and args.metadata_url:
        # Pulsar's etcd:https://... form from the command line too (the file's is converted)
        try:
            args.metadata_url = conffile.metadata_url(args.metadata_url)
        except ValueError as err:
            commands[args.command].error(f"--metadata-url {args.metadata_url}: {err}")
    return args


_METADATA_URL_FORMS = ("broker", "bookie", "proxy", "autorecovery")
"""Commands whose --metadata-url takes Pulsar's forms (etcd:http(s)://...) besides etcd://."""


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what broker workers re-run
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
