"""``--config FILE`` (magnetar.conffile + magnetar.cli): Pulsar key names mapped to options,
empty values unset, flags over the file, unknown and unsupported keys refused by name; and
every key the operator (and the Helm chart's PulsarCluster, through the operator) renders
into broker.conf / bookkeeper.conf is consumed by the process's loader."""

from __future__ import annotations

import argparse
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from magnetar import cli, conffile
from magnetar.broker import backlog_quota
from magnetar_operator.builders import bookie, broker, proxy
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec
from tests.unit.operator.schemas import ROOT
from tests.unit.operator.test_helm import CHART, CI_VALUES, KUBE, binary

OWNER = Owner(name="dev", namespace="pulsar", uid="0b1c2d3e-aaaa-bbbb-cccc-000000000001")


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


# --- the tables ---------------------------------------------------------------------------------


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in parser._actions}


@pytest.mark.parametrize("command", ["broker", "bookie", "standalone", "proxy"])
def test_every_table_entry_sets_an_option_of_its_command(command: str) -> None:
    _, commands = cli._build()
    dests = _dests(commands[command])
    for key, rule in conffile.TABLES[command].items():
        if isinstance(rule, conffile.Opt):
            assert rule.dest in dests, f"{command}: {key} -> {rule.dest} is no option"


def test_proxy_file_sets_options(tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        "proxy.conf",
        "metadataStoreUrl=etcd:http://etcd-0:2379\nservicePort=6651\nwebServicePort=8081\n",
    )
    args = cli.parse_args(["proxy", "--config", conf, "--port", "7000"])
    assert args.metadata_url == "etcd://etcd-0:2379"
    assert (args.port, args.http_port) == (7000, 8081), "flags override the file"
    bad = write(tmp_path, "bad.conf", "brokerClientTlsEnabled=true\n")
    with pytest.raises(SystemExit):
        cli.parse_args(["proxy", "--config", bad])


@pytest.mark.parametrize("command", ["broker", "standalone"])
def test_backlog_quota_keys_are_honoured(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pulsar's backlogQuota* keys (backlogQuotaDefaultRetentionPolicy, an enum field, was once
    missed by the key generator and refused as unknown)."""
    conf = write(
        tmp_path,
        f"{command}.conf",
        ("metadataStoreUrl=etcd:http://127.0.0.1:2379\n" if command == "broker" else "")
        + "backlogQuotaCheckEnabled=false\n"
        "backlogQuotaCheckIntervalInSeconds=5\n"
        "backlogQuotaDefaultLimitBytes=-1\n"
        "backlogQuotaDefaultLimitGB=2\n"
        "backlogQuotaDefaultLimitSecond=3600\n"
        "backlogQuotaDefaultRetentionPolicy=consumer_backlog_eviction\n",
    )
    config = cli.broker_config(cli.parse_args([command, "--config", conf]))
    assert config.backlog_quota_check_enabled is False
    assert config.backlog_quota_check_interval_s == 5
    assert config.backlog_quota_default_limit_s == 3600
    assert config.backlog_quota_default_policy == "consumer_backlog_eviction"
    quotas = backlog_quota.resolve({}, config)
    assert quotas.size == backlog_quota.Quota(2 << 30, "consumer_backlog_eviction")
    assert quotas.time == backlog_quota.Quota(3600, "consumer_backlog_eviction")
    bad = write(tmp_path, "bad.conf", "backlogQuotaDefaultRetentionPolicy=drop_everything\n")
    assert "backlogQuotaDefaultRetentionPolicy" in refused(capsys, [command, "--config", bad])


def test_broker_file_sets_options_and_converts_units(tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        "broker.conf",
        "# Pulsar's style: comments, blanks, empty values\n\n"
        "clusterName=prod\n"
        "metadataStoreUrl=etcd:http://etcd-0:2379,http://etcd-1:2379\n"
        "advertisedAddress=\n"
        "brokerServicePort = 6651\n"
        "managedLedgerDefaultEnsembleSize=3\n"
        "managedLedgerDefaultWriteQuorum=3\n"
        "managedLedgerDefaultAckQuorum=2\n"
        "managedLedgerMaxEntriesPerLedger=1000\n"
        "managedLedgerMaxLedgerRolloverTimeMinutes=10\n"
        "metadataStoreSessionTimeoutMillis=30000\n"
        "defaultNumberOfNamespaceBundles=8\n"
        "brokerDeduplicationEnabled=true\n"
        "replicationProducerQueueSize=250\n"
        "forceDeleteTenantAllowed=true\n"
        "authenticationEnabled=false\n"
        "bookkeeperClientRackawarePolicyEnabled=true\n"
        "bookkeeperClientMinNumRacksPerWriteQuorum=2\n"
        "bookkeeperClientEnforceMinNumRacksPerWriteQuorum=true\n"
        "managedLedgerCacheSizeMB=512\n"
        "managedLedgerCacheEvictionWatermark=0.75\n"
        "preciseDispatcherFlowControl=true\n",
    )
    args = cli.parse_args(["broker", "--config", conf])
    config = cli.broker_config(args)
    assert config.precise_dispatcher_flow_control is True
    assert config.managed_ledger_cache_size_mb == 512
    assert config.managed_ledger_cache_eviction_watermark == 0.75
    assert config.bookkeeper_min_racks_per_write_quorum == 2
    assert config.bookkeeper_enforce_min_racks is True
    assert config.replication_producer_queue_size == 250
    assert args.cluster_name == "prod"
    assert args.metadata_url == "etcd://etcd-0:2379,etcd-1:2379"
    assert args.advertised_address == "127.0.0.1", "an empty value is unset"
    assert args.port == 6651
    assert (args.ensemble_size, args.write_quorum, args.ack_quorum) == (3, 3, 2)
    assert args.max_entries_per_ledger == 1000
    assert args.max_ledger_age == 600.0
    assert args.session_ttl == 30.0
    assert args.default_bundles == 8
    assert args.deduplication_enabled is True
    assert args.force_delete_tenant_allowed is True
    assert args.force_delete_namespace_allowed is False, "Pulsar's default"


def test_flags_override_the_file(tmp_path: Path) -> None:
    conf = write(tmp_path, "broker.conf", "metadataStoreUrl=etcd://a:1\nbrokerServicePort=7000\n")
    args = cli.parse_args(["broker", "--config", conf, "--port", "7001"])
    assert args.port == 7001
    args = cli.parse_args(["broker", "--metadata-url=etcd://b:2", "--config", conf])
    assert args.metadata_url == "etcd://b:2"


def test_bookie_file(tmp_path: Path) -> None:
    conf = write(
        tmp_path,
        "bookkeeper.conf",
        "metadataServiceUri=metadata-store:etcd:http://etcd:2379\n"
        "bookiePort=3182\nhttpServerPort=8001\nhttpServerEnabled=true\n"
        "journalDirectories=/j\nledgerDirectories=/l\n"
        "flushInterval=60000\ngcWaitTime=900000\njournalMaxGroupWaitMSec=2\n"
        "autoRecoveryDaemonEnabled=true\nauditorLostBookieRecoveryDelay=60\n"
        "auditorPeriodicCheckInterval=3600\nopenLedgerRereplicationGracePeriod=30000\n"
        "minNumRacksPerWriteQuorum=2\nenforceMinNumRacksPerWriteQuorum=true\n"
        "replicationRateByBytes=2097152\n",
    )
    args = cli.parse_args(["bookie", "--config", conf])
    assert args.autorecovery is True
    assert (args.lost_bookie_recovery_delay, args.periodic_check_interval) == (60.0, 3600.0)
    assert args.open_ledger_grace == 30.0
    assert args.replication_rate_by_bytes == 2097152
    assert (args.min_racks_per_write_quorum, args.enforce_min_racks_per_write_quorum) == (2, True)
    assert args.metadata_url == "etcd://etcd:2379"
    assert (args.port, args.http_port) == (3182, 8001)
    assert (args.journal_dir, args.data_dir) == ("/j", "/l")
    assert (args.flush_interval, args.gc_interval, args.journal_group_wait_ms) == (
        60.0,
        900.0,
        2.0,
    )


def test_bookkeepers_key_for_the_lost_bookie_delay(tmp_path: Path) -> None:
    """``lostBookieRecoveryDelay`` is BookKeeper's key (and Pulsar's bookkeeper.conf's); the
    name Magnetar read before, ``auditorLostBookieRecoveryDelay``, is still read."""
    for key in ("lostBookieRecoveryDelay", "auditorLostBookieRecoveryDelay"):
        conf = write(tmp_path, "bookkeeper.conf", f"metadataServiceUri=etcd://e:2379\n{key}=300\n")
        args = cli.parse_args(["bookie", "--config", conf, "--data-dir", "/d"])
        assert args.lost_bookie_recovery_delay == 300.0, key


def test_autorecovery_reads_the_bookies_file(tmp_path: Path) -> None:
    """``magnetar autorecovery --config bookkeeper.conf``: the metadata URL and the
    autorecovery keys; the bookie's own keys are not used (logged); flags win."""
    conf = write(
        tmp_path,
        "bookkeeper.conf",
        "metadataServiceUri=metadata-store:etcd:http://etcd:2379\n"
        "bookiePort=3181\nledgerDirectories=/l\njournalDirectories=/j\n"
        "autoRecoveryDaemonEnabled=false\nlostBookieRecoveryDelay=120\n"
        "auditorPeriodicCheckInterval=0\nopenLedgerRereplicationGracePeriod=45000\n"
        "replicationRateByBytes=1048576\nminNumRacksPerWriteQuorum=2\n"
        "enforceMinNumRacksPerWriteQuorum=true\n",
    )
    args = cli.parse_args(["autorecovery", "--config", conf])
    assert args.metadata_url == "etcd://etcd:2379"
    assert (args.lost_bookie_recovery_delay, args.periodic_check_interval) == (120.0, 0.0)
    assert args.open_ledger_grace == 45.0
    assert args.replication_rate_by_bytes == 1048576
    assert (args.min_racks_per_write_quorum, args.enforce_min_racks_per_write_quorum) == (2, True)
    flags = cli.parse_args(["autorecovery", "--config", conf, "--lost-bookie-recovery-delay=7"])
    assert flags.lost_bookie_recovery_delay == 7.0
    typo = write(tmp_path, "typo.conf", "metadataServiceUri=etcd://e:2379\nlostBookieDelay=1\n")
    with pytest.raises(SystemExit) as refused:
        cli.parse_args(["autorecovery", "--config", typo])
    assert refused.value.code == 2


@pytest.mark.parametrize(
    ("command", "name", "text", "message"),
    [
        ("broker", "broker.conf", "tlsProtocols=SSLv3\n", "unsupported TLS protocol 'SSLv3'"),
        (
            "broker",
            "broker.conf",
            "brokerServicePrt=6650\n",
            "unknown key 'brokerServicePrt' (line 1), one Apache Pulsar does not know either; "
            "did you mean 'brokerServicePort'?",
        ),
        (
            "broker",
            "broker.conf",
            "authenticationProviders=com.example.Mine\n",
            "unsupported authentication provider 'com.example.Mine'",
        ),
        ("broker", "broker.conf", "tokenPublicAlg=HS256\n", "tokenPublicKey's key type"),
        ("broker", "broker.conf", "brokerServicePort=abc\n", "brokerServicePort=abc (line 1)"),
        ("broker", "broker.conf", "# a comment\njustakey\n", "unknown key 'justakey' (line 2)"),
        ("bookie", "bookkeeper.conf", "ledgerDirectories=/a,/b\n", "one directory"),
        ("bookie", "bookkeeper.conf", "journalDirectry=/j\n", "did you mean 'journalDirectory'?"),
        ("standalone", "standalone.conf", "managedLedgerDefaultEnsembleSize=2\n", "'1' accepted"),
        ("standalone", "standalone.conf", "nope=1\n", "unknown key 'nope'"),
        (
            "broker",
            "broker.conf",
            "replicationProducerQueueSize=0\n",
            "replicationProducerQueueSize=0 (line 1): expected a positive integer",
        ),
        ("proxy", "proxy.conf", "servicePortTsl=6651\n", "did you mean 'servicePortTls'?"),
    ],
)
def test_refused_files_name_the_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    name: str,
    text: str,
    message: str,
) -> None:
    conf = write(tmp_path, name, text)
    err = refused(capsys, [command, "--config", conf])
    assert err.startswith(f"magnetar {command}: "), err
    assert message in err, err


def test_required_options_may_come_from_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, ["broker"])
    assert "--metadata-url (or metadataStoreUrl in --config FILE) is required" in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, ["standalone", "--config", str(tmp_path / "nope.conf")])
    assert "nope.conf" in err


# --- what the operator and the chart render is consumed ----------------------------------------


def _example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "crds/examples" / name).read_text())
    return dict(doc["spec"])


def _helm_cluster_specs() -> list[tuple[str, dict[str, Any]]]:
    """The PulsarCluster spec of each helm/magnetar/ci values file that installs one, as the
    chart renders it (needs the pinned helm; the raw values otherwise would not prove it)."""
    helm = binary("helm")
    if helm is None:
        return []
    out: list[tuple[str, dict[str, Any]]] = []
    for values in CI_VALUES:
        proc = subprocess.run(
            [str(helm), "template", "rel", str(CHART), "-n", "x", *KUBE, "-f", str(values)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        out.extend(
            (f"helm:{values.name}", dict(doc.get("spec") or {}))
            for doc in yaml.safe_load_all(proc.stdout)
            if doc and doc.get("kind") == "PulsarCluster"
        )
    return out


SPECS: list[tuple[str, dict[str, Any]]] = [
    ("defaults", {}),
    *[(p.name, _example(p.name)) for p in sorted((ROOT / "crds/examples").glob("pulsarcluster-*"))],
    (
        "external-metadata",
        {"metadata": {"mode": "external", "externalEndpoints": ["http://e-0:2379"]}},
    ),
    ("rack-aware", {"bookies": {"rackAwareness": {"enabled": True}}}),
    (
        "offload-minio",
        {
            "offload": {
                "enabled": True,
                "endpoint": "http://minio:9000",
                "bucket": "b",
                "credentialsSecret": "s3",
            }
        },
    ),
    ("offload-aws", {"offload": {"enabled": True, "bucket": "b", "credentialsSecret": "s3"}}),
    *_helm_cluster_specs(),
]


@pytest.mark.parametrize(("name", "raw"), SPECS, ids=[n for n, _ in SPECS])
def test_every_rendered_key_is_consumed(name: str, raw: dict[str, Any]) -> None:
    spec = ClusterSpec.parse(raw)
    for command, data in (
        ("broker", broker.config_data(OWNER, spec)),
        ("bookie", bookie.config_data(OWNER, spec)),
        ("proxy", proxy.config_data(OWNER, spec)),
    ):
        table = conffile.TABLES[command]
        for key in data:
            assert isinstance(table.get(key), conffile.Opt), f"{name}: {command} ignores {key}"
        entries = conffile.parse_lines("".join(f"{k}={v}\n" for k, v in data.items()), name="x")
        values = conffile.options(table, entries, name="x")
        assert values, f"{name}: {command}"


def test_rendered_files_start_the_processes_options(tmp_path: Path) -> None:
    """The ConfigMap's text, as mounted, parsed by the CLI with the pod's arguments."""
    spec = ClusterSpec.parse(_example("pulsarcluster-production.yaml"))
    cm = broker.config_map(OWNER, spec)
    conf = write(tmp_path, broker.CONFIG_FILE, cm["data"][broker.CONFIG_FILE])
    argv = [
        a.replace(f"{broker.CONFIG_DIR}/{broker.CONFIG_FILE}", conf)
        for a in broker.args(OWNER, spec)
    ]
    args = cli.parse_args([a.replace("$(POD_IP)", "10.0.0.7") for a in argv])
    assert (args.cluster_name, args.advertised_address, args.port) == ("dev", "10.0.0.7", 6650)
    assert (args.ensemble_size, args.write_quorum, args.ack_quorum) == (3, 3, 2)
    assert args.max_message_size == 5242880 and args.deduplication_enabled is True

    cm = bookie.config_map(OWNER, spec)
    conf = write(tmp_path, bookie.CONFIG_FILE, cm["data"][bookie.CONFIG_FILE])
    argv = [
        a.replace(f"{bookie.CONFIG_DIR}/{bookie.CONFIG_FILE}", conf)
        for a in bookie.args(OWNER, spec)
    ]
    args = cli.parse_args(argv)
    assert args.metadata_url == "etcd://dev-etcd-client.pulsar.svc:2379"
    assert (args.data_dir, args.journal_dir) == (bookie.LEDGERS_DIR, bookie.JOURNAL_DIR)
    assert args.journal_group_wait_ms == 1.0, "extraArgs (flags) still apply"

    cm = proxy.config_map(OWNER, spec)
    conf = write(tmp_path, proxy.CONFIG_FILE, cm["data"][proxy.CONFIG_FILE])
    argv = [a.replace(f"{proxy.CONFIG_DIR}/{proxy.CONFIG_FILE}", conf) for a in proxy.args(spec)]
    args = cli.parse_args(argv)
    assert args.metadata_url == "etcd://dev-etcd-client.pulsar.svc:2379"
    assert (args.port, args.http_port) == (6650, 8080)


def test_a_user_key_the_broker_does_not_consume_is_caught_by_the_loader() -> None:
    spec = ClusterSpec.parse({"brokers": {"config": {"zookeeperServers": "zk:2181"}}})
    data = broker.config_data(OWNER, spec)
    with pytest.raises(conffile.ConfigError, match="zookeeperServers"):
        conffile.options(
            conffile.BROKER,
            conffile.parse_lines(
                "".join(f"{k}={v}\n" for k, v in data.items()), name="broker.conf"
            ),
            name="broker.conf",
        )


def test_every_key_is_documented() -> None:
    doc = (ROOT / "docs/configuration.md").read_text()
    for command, table in conffile.TABLES.items():
        for key in table:
            assert f"`{key}`" in doc, f"docs/configuration.md does not list {command}'s {key}"


def test_rendered_offload_keys_configure_the_brokers_offloader(tmp_path: Path) -> None:
    raw = {"offload": {"enabled": True, "endpoint": "http://minio:9000", "bucket": "tiered",
                       "credentialsSecret": "s3", "thresholdSeconds": 60}}  # fmt: skip
    spec = ClusterSpec.parse(raw)
    cm = broker.config_map(OWNER, spec)
    conf = write(tmp_path, broker.CONFIG_FILE, cm["data"][broker.CONFIG_FILE])
    args = cli.parse_args(["broker", f"--config={conf}", "--advertised-address=10.0.0.7"])
    s3 = cli.offload_config(args)
    assert s3 is not None
    assert (s3.driver, s3.bucket, s3.endpoint_url, s3.path_style) == (
        "S3",
        "tiered",
        "http://minio:9000",
        True,
    )
    assert args.offload_threshold_seconds == 60
    assert args.offload_deletion_lag_ms == 14400 * 1000
    assert cli.offload_config(cli.parse_args(["broker", "--metadata-url=etcd://e:2379"])) is None


def test_advertised_listeners_are_checked_by_the_one_url_parser() -> None:
    assert conffile.listeners(
        "internal:pulsar://10.0.0.1:6650, internal:pulsar+ssl://10.0.0.1:6651, external:pulsar://h:1"
    ) == (
        ("internal", "pulsar://10.0.0.1:6650"),
        ("internal", "pulsar+ssl://10.0.0.1:6651"),
        ("external", "pulsar://h:1"),
    )
    for bad, says in (
        ("external:http://h:1", "pulsar://"),
        ("a:pulsar+ssl://h:6651/x", "no path"),
        ("a:pulsar://", "names no host"),
        ("a:pulsar://h:99999", "port"),
        ("nameless", "name:pulsar://host:port"),
    ):
        with pytest.raises(ValueError, match=says):
            conffile.listeners(bad)


def test_pulsars_own_files_start_magnetar_unchanged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The benchmarks' Apache Pulsar standalone.conf (which Pulsar runs as it is) is read:
    the keys Magnetar uses set its options, the other Pulsar keys are reported in one line."""
    conf = Path(__file__).resolve().parents[2] / "bench/peers/standalone.conf"
    with caplog.at_level(logging.WARNING, logger="magnetar.conffile"):
        args = cli.parse_args(["standalone", "--config", str(conf)])
    assert args.bind_address == "127.0.0.1"
    reports = [r.getMessage() for r in caplog.records]
    assert len(reports) == 1, reports
    assert "keys of Apache Pulsar's that Magnetar does not use, ignored" in reports[0]
    assert "loadManagerClassName" in reports[0] and "journalSyncData" in reports[0]


def test_files_are_read_as_java_properties(tmp_path: Path) -> None:
    """Separators ``=``, ``:`` and blanks, continuation lines and escapes, as Pulsar reads
    them; line numbers in errors count the file's lines."""
    conf = write(
        tmp_path,
        "broker.conf",
        "! a comment\n"
        "clusterName : east\n"
        "advertisedAddress  broker-1.example\n"
        "superUserRoles=admin,\\\n"
        "    ops\n"
        "brokerServicePort=\\u0036650\n"
        "zookeeperServers=zk:2181\n",
    )
    args = cli.parse_args(["broker", "--config", conf, "--metadata-url", "etcd://h:2379"])
    assert args.cluster_name == "east"
    assert args.advertised_address == "broker-1.example"
    assert args.super_user_roles == ("admin", "ops")
    assert args.port == 6650
    bad = write(tmp_path, "broker2.conf", "a=1\nb=\\\n  2\nbrokerServicePort=x\n")
    with pytest.raises(conffile.ConfigError, match=r"unknown key 'a' \(line 1\)"):
        conffile.load(Path(bad), conffile.BROKER, conffile.KNOWN["broker"])
    ok_then_bad = write(
        tmp_path, "broker3.conf", "clusterName=c\nsuperUserRoles=a,\\\n  b\nwebServicePort=x\n"
    )
    with pytest.raises(conffile.ConfigError, match=r"\(line 4\)"):
        conffile.load(Path(ok_then_bad), conffile.BROKER, conffile.KNOWN["broker"])


def test_functions_runtime_key_and_flag(tmp_path: Path) -> None:
    conf = write(tmp_path, "broker.conf", "magnetarFunctionsRuntime=kubernetes\n")
    args = cli.parse_args(["broker", "--metadata-url", "etcd://e:2379", "--config", conf])
    assert args.functions_runtime == "kubernetes"
    args = cli.parse_args(["broker", "--metadata-url", "etcd://e:2379"])
    assert args.functions_runtime == "none"
    bad = write(tmp_path, "bad.conf", "magnetarFunctionsRuntime=lambda\n")
    with pytest.raises(SystemExit):
        cli.parse_args(["broker", "--metadata-url", "etcd://e:2379", "--config", bad])


def test_replication_window_flag(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.parse_args(["standalone", "--replication-producer-queue-size", "64"])
    assert cli.broker_config(args).replication_producer_queue_size == 64
    assert cli.broker_config(cli.parse_args(["standalone"])).replication_producer_queue_size == 1000
    err = refused(capsys, ["standalone", "--replication-producer-queue-size", "0"])
    assert "--replication-producer-queue-size: expected a positive integer" in err


def test_entry_cache_budget_keys_and_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Pulsar's files leave the size empty: the default (a fifth of the memory, 64 to 1024 MB)
    conf = write(tmp_path, "standalone.conf", "managedLedgerCacheSizeMB=\n")
    config = cli.broker_config(cli.parse_args(["standalone", "--config", conf]))
    assert config.managed_ledger_cache_size_mb is None
    assert config.managed_ledger_cache_eviction_watermark == 0.9
    args = cli.parse_args(["standalone", "--managed-ledger-cache-size-mb", "0"])
    assert cli.broker_config(args).managed_ledger_cache_size_mb == 0, "0: no cache"
    err = refused(capsys, ["standalone", "--managed-ledger-cache-size-mb", "-1"])
    assert "--managed-ledger-cache-size-mb: expected an integer >= 0" in err
    err = refused(capsys, ["broker", "--managed-ledger-cache-eviction-watermark", "1.5"])
    assert "expected a number above 0 and at most 1" in err
