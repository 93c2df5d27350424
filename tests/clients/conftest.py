"""Targets of the official-client conformance suites (Java, Go): the suites are programs of
their own, run against a broker given by its service and admin URLs.

By default (``make test``) every suite runs against a ``magnetar standalone``, against a
two-broker etcd cluster (one bookie; the suites create their namespaces with several
bundles, so topics land on both brokers and lookups redirect) and against a ``secured``
standalone (:mod:`tests.support.secured`: TLS with a CA made by the test, token, TLS and
basic authentication, authorization on) whose plaintext ports are off: the suites' clients
and admin clients go over ``pulsar+ssl://`` and ``https://``, verify the broker's hostname
against that CA and authenticate with a super-user's token (``Target.env``: the
``MAGNETAR_TLS_TRUST_CERTS`` and ``MAGNETAR_AUTH_TOKEN`` the suite scripts pass on). With
``MAGNETAR_CLIENTS_AGAINST=pulsar`` (``make test-clients-pulsar``) they run against Apache
Pulsar standalone instead (installed from Maven Central by ``scripts/bench/install_pulsar.sh``),
to tell a Magnetar gap from a client quirk. Each target is started once per session and
stopped by pid.
"""

from __future__ import annotations

import importlib.util
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import standalone as standalone_procs
from tests.support.bookies import BookieProc
from tests.support.etcd import EtcdServer, etcd_available
from tests.support.procs import started
from tests.support.secured import Secured
from tests.support.standalone import BrokerProc
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
AGAINST = os.environ.get("MAGNETAR_CLIENTS_AGAINST", "magnetar")
TARGETS = ["pulsar"] if AGAINST == "pulsar" else ["standalone", "cluster", "secured"]


@dataclass(frozen=True)
class Target:
    name: str
    service_url: str
    admin_url: str
    broker_http_urls: tuple[str, ...] = ()
    """Every broker of a Magnetar target (the clients are given the first one's URLs)."""
    tls_trust_certs: Path | None = None
    """The CA's PEM file of a TLS target (the clients verify the broker's hostname)."""
    auth_token: str | None = None
    """A super-user's token the clients authenticate with."""

    def env(self) -> dict[str, str]:
        """The environment of the suite scripts: this one, with the TLS trust and the token
        of a secured target (and without any inherited from elsewhere otherwise)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("MAGNETAR_TLS_TRUST_CERTS", "MAGNETAR_AUTH_TOKEN")
        }
        if self.tls_trust_certs is not None:
            env["MAGNETAR_TLS_TRUST_CERTS"] = str(self.tls_trust_certs)
        if self.auth_token is not None:
            env["MAGNETAR_AUTH_TOKEN"] = self.auth_token
        return env

    def check_spread(self, tenant_prefix: str) -> None:
        """On a cluster, every broker served topics of the suite (whose tenants start with
        ``tenant_prefix``): the clients, given one broker, were redirected to the other."""
        if len(self.broker_http_urls) < 2:
            return
        for url in self.broker_http_urls:
            with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
                text = r.read().decode()
            served = {
                line.split('topic="', 1)[1].split('"', 1)[0]
                for line in text.splitlines()
                if line.startswith("pulsar_in_messages_total{")
                and f'namespace="{tenant_prefix}' in line
            }
            assert served, f"broker {url} served no topic of the suite: no redirects happened"


def _standalone(tmp: Path) -> Iterator[Target]:
    with standalone_procs.running(tmp / "data") as proc:
        yield Target("standalone", proc.service_url, proc.http_url)


def _both_registered(broker: BrokerProc, others: list[BrokerProc]) -> bool:
    with urllib.request.urlopen(f"{broker.http_url}/admin/v2/brokers/standalone", timeout=5) as r:
        listed = r.read().decode()
    return all(f"{o.port}" in listed for o in others)


def _cluster(tmp: Path) -> Iterator[Target]:
    if not etcd_available():
        pytest.skip("etcd is not installed (scripts/setup.sh installs Debian's etcd-server)")
    etcd = EtcdServer(tmp / "etcd").start()
    bookie = brokers = None
    try:
        bookie = BookieProc(etcd.url, tmp).start()
        brokers = [BrokerProc(etcd.url, tmp, ensemble=(1, 1, 1)) for _ in range(2)]
        for b in brokers:
            b.start()
        wait_until(
            lambda: _both_registered(brokers[0], brokers), timeout=30, what="both brokers listed"
        )
        yield Target(
            "cluster",
            brokers[0].service_url,
            brokers[0].http_url,
            tuple(b.http_url for b in brokers),
        )
    finally:
        for b in brokers or []:
            b.stop()
        if bookie is not None:
            bookie.stop()
        etcd.stop()


def _secured(tmp: Path) -> Iterator[Target]:
    # No plaintext listener at all: a client or a lookup answer falling back to pulsar:// or
    # http:// has nowhere to go.
    off = {"brokerServicePort": "", "webServicePort": ""}
    with started(Secured(tmp, extra_conf=off)) as proc:
        # without their token the suites' own set-up (clusters, tenants) is refused: the
        # caller is then the anonymous role, no super-user (401, as Pulsar 4 answers it)
        assert proc.https("GET", "/admin/v2/clusters")[0] == 401
        yield Target(
            "secured",
            proc.tls_service_url,
            proc.https_url,
            tls_trust_certs=proc.ca.ca_file,
            auth_token=proc.super_token,
        )


def _pulsar(tmp: Path) -> Iterator[Target]:
    spec = importlib.util.spec_from_file_location("peer_systems", ROOT / "bench/peers/systems.py")
    assert spec is not None and spec.loader is not None
    systems = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(systems)
    pulsar = systems.PulsarStandalone(tmp)
    # Pulsar acknowledges batches whole unless told otherwise; Magnetar always tracks batch
    # indexes, and the suites test that (enableBatchIndexAcknowledgment on the clients).
    # broker-stats lists the topics Pulsar gathered at its last stats round (every 60 s by
    # default; Magnetar answers with the topics of the moment): every 5 s here.
    pulsar.extra_conf = {
        "acknowledgmentAtBatchIndexLevelEnabled": "true",
        "statsUpdateFrequencyInSecs": "5",
    }
    pulsar.install()
    url = pulsar.start()
    try:
        yield Target("pulsar", url, f"http://127.0.0.1:{pulsar.http_port}")
    finally:
        pulsar.stop()


_STARTERS = {
    "standalone": _standalone,
    "cluster": _cluster,
    "secured": _secured,
    "pulsar": _pulsar,
}


@pytest.fixture(scope="session", params=TARGETS)
def client_target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    """A running broker for the client suites (see the module docstring)."""
    name: str = request.param
    yield from _STARTERS[name](tmp_path_factory.mktemp(f"clients-{name}"))
