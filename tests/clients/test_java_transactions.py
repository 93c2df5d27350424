"""Transactions with the official Java client (tests/clients/java: TransactionTest,
TransactionKillTest) against a ``magnetar standalone`` started with
``--transaction-coordinator-enabled true``: commit and abort across two topics,
consume-transform-produce with transactional acknowledgements, and a broker SIGKILLed while
a commit is in flight (and another transaction is open) then restarted -- each transaction
is then on both topics or on neither, checked by content."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.conftest import ROOT, _both_registered
from tests.clients.test_java_client import surefire_summary
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer, etcd_available
from tests.support.standalone import BrokerProc, StandaloneProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None or shutil.which("mvn") is None,
    reason="the Java suite needs Java 17 and Maven (java, mvn on PATH)",
)
SUITE = ROOT / "scripts/clients/java-suite.sh"


def java(standalone: StandaloneProc, build: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen(
        [str(SUITE), standalone.service_url, standalone.http_url, *args],
        env={**os.environ, "JAVA_SUITE_BUILD_DIR": str(build)},
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def finished(proc: subprocess.Popen[bytes], build: Path, log: Path, timeout: float) -> int:
    """Wait for a suite run; the scenarios it ran (failing on any failure)."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    run, failed = surefire_summary(build / "surefire-reports")
    tail = log.read_text(errors="replace")[-3000:]
    assert run > 0, f"no scenario ran (exit {proc.returncode}):\n{tail}"
    assert not failed and proc.returncode == 0, "\n".join(failed) or tail
    return run


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneProc]:
    proc = StandaloneProc(
        tmp_path / "data", extra_args=["--transaction-coordinator-enabled", "true"]
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.timeout(900)
def test_commit_abort_and_consume_transform_produce(
    standalone: StandaloneProc, tmp_path: Path
) -> None:
    build, log = tmp_path / "build", tmp_path / "java.log"
    proc = java(standalone, build, log, "-Dtest=TransactionTest", "-Dmagnetar.transactions=true")
    assert finished(proc, build, log, 800) == 2


@pytest.mark.timeout(900)
def test_admin_transactions(standalone: StandaloneProc, tmp_path: Path) -> None:
    """PulsarAdmin's transactions(): coordinator stats, metadata, slow transactions, abort;
    a transaction in a topic's buffer and in a subscription's pending acks."""
    build, log = tmp_path / "build", tmp_path / "java.log"
    proc = java(
        standalone, build, log, "-Dtest=TransactionAdminTest", "-Dmagnetar.transactions=true"
    )
    assert finished(proc, build, log, 800) == 2


def test_magnetar_admin_transactions(standalone: StandaloneProc) -> None:
    """``magnetar admin transactions``: the coordinator's state; an unknown transaction is a
    404 naming it."""

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", standalone.http_url]
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60)

    stats = admin("--output", "json", "transactions", "coordinator-stats")
    assert stats.returncode == 0 and json.loads(stats.stdout)["0"]["state"] == "Ready"
    one = admin("--output", "json", "transactions", "coordinator-stats", "-c", "0")
    assert json.loads(one.stdout)["state"] == "Ready"
    assert (
        json.loads(admin("-o", "json", "transactions", "slow-transactions", "-t", "1h").stdout)
        == {}
    )
    missing = admin("transactions", "transaction-metadata", "-m", "0", "-l", "999")
    assert missing.returncode == 1
    assert "404 Transaction not found: (0,999)" in missing.stderr


@pytest.mark.timeout(900)
def test_sigkill_mid_transaction_is_atomic(standalone: StandaloneProc, tmp_path: Path) -> None:
    topic = f"persistent://public/default/txn-kill-{uuid.uuid4().hex[:8]}"
    signal_file = tmp_path / "committing"
    common = ["-Dtest=TransactionKillTest", f"-Dmagnetar.txnTopic={topic}"]
    write_build, write_log = tmp_path / "write", tmp_path / "write.log"
    writer = java(
        standalone,
        write_build,
        write_log,
        *common,
        "-Dmagnetar.txnPhase=write",
        f"-Dmagnetar.txnSignal={signal_file}",
    )
    try:
        wait_until(
            lambda: signal_file.exists() or writer.poll() is not None,
            timeout=600,
            what="the writer's commit going out",
        )
        assert signal_file.exists(), write_log.read_text(errors="replace")[-3000:]
        standalone.kill()  # SIGKILL while the commit is in flight
        finished(writer, write_build, write_log, 300)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    print([line for line in write_log.read_text().splitlines() if "TXN-KILL" in line])
    standalone.start()
    check_build, check_log = tmp_path / "check", tmp_path / "check.log"
    checker = java(standalone, check_build, check_log, *common, "-Dmagnetar.txnPhase=check")
    finished(checker, check_build, check_log, 600)
    print([line for line in check_log.read_text().splitlines() if "TXN-KILL" in line])


@pytest.mark.timeout(900)
def test_commit_abort_on_a_two_broker_cluster(tmp_path: Path) -> None:
    """The same scenarios on two brokers of an etcd cluster, with topics drawn until one is
    served by the broker that does not serve the coordinator (``magnetar.spread``), so the
    coordinator's decisions reach it over the protocol (END_TXN_ON_PARTITION /
    END_TXN_ON_SUBSCRIPTION)."""
    if not etcd_available():
        pytest.skip("etcd is not installed (scripts/setup.sh installs Debian's etcd-server)")
    etcd = EtcdServer(tmp_path / "etcd").start()
    bookie = None
    brokers: list[BrokerProc] = []
    try:
        bookie = BookieProc(etcd.url, tmp_path).start()
        brokers = [
            BrokerProc(
                etcd.url,
                tmp_path,
                ensemble=(1, 1, 1),
                extra_args=["--transaction-coordinator-enabled", "true"],
            )
            for _ in range(2)
        ]
        for b in brokers:
            b.start()
        wait_until(
            lambda: _both_registered(brokers[0], brokers), timeout=30, what="both brokers listed"
        )
        build, log = tmp_path / "build", tmp_path / "java.log"
        proc = java(
            brokers[0],
            build,
            log,
            "-Dtest=TransactionTest",
            "-Dmagnetar.transactions=true",
            "-Dmagnetar.spread=true",
        )
        assert finished(proc, build, log, 800) == 2
        served = [
            sum(
                "jt-transactiontest" in line and line.endswith(": loaded")
                for line in b.proc.log_path.read_text(errors="replace").splitlines()
            )
            for b in brokers
        ]
        # TransactionTest picked topics of which one is served by the other broker than the
        # coordinator: those saw their markers and acks only through END_TXN_ON_*
        print(f"TransactionTest topics loaded per broker: {served}")
    finally:
        for b in brokers:
            b.stop()
        if bookie is not None:
            bookie.stop()
        etcd.stop()
