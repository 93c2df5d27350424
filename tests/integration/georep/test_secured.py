"""Geo-replication between two secured clusters: TLS-only clients, token authentication and
authorization on both standalones, each with its own CA and token key. Each broker's
replicators reach the other cluster on its ``pulsar+ssl://`` URL with the broker's client
settings -- ``brokerClientTlsEnabled``, the other cluster's CA as
``brokerClientTrustCertsFilePath``, a super-user token of the other cluster as
``brokerClientAuthenticationParameters`` (docs/geo-replication.md, docs/security.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.support.procs import started
from tests.support.secured import Secured
from tests.support.wait import wait_until

TOPIC = "persistent://geo/secure/t"


def _trusting(me: Secured, name: str, other: Secured) -> None:
    """``me`` is cluster ``name`` and calls ``other`` as its super-user, over TLS."""
    with me.conf_file.open("a") as conf:
        conf.write(
            f"clusterName={name}\n"
            "brokerClientTlsEnabled=true\n"
            f"brokerClientTrustCertsFilePath={other.ca.ca_file}\n"
            "brokerClientAuthenticationPlugin="
            "org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
            f"brokerClientAuthenticationParameters=token:{other.token('superUser')}\n"
        )


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Secured, Secured]]:
    tmp: Path = tmp_path_factory.mktemp("georep-secured")
    a, b = Secured(tmp / "a"), Secured(tmp / "b")
    _trusting(a, "a", b)
    _trusting(b, "b", a)
    with started(a), started(b):
        for me, (other_name, other) in ((a, ("b", b)), (b, ("a", a))):
            me.admin(
                "clusters", "create", other_name,
                "--url-secure", other.https_url, "--broker-url-secure", other.tls_service_url,
            )  # fmt: skip
            me.admin("tenants", "create", "geo", "--allowed-clusters", "a,b")
            me.admin("namespaces", "create", "geo/secure")
            me.admin("namespaces", "set-clusters", "geo/secure", "--clusters", "a,b")
        yield a, b


def test_replication_over_tls_with_tokens(secured: tuple[Secured, Secured]) -> None:
    a, b = secured
    token_a, token_b = a.token("superUser"), b.token("superUser")
    ca = a.client(authentication=pulsar.AuthenticationToken(token_a))
    cb = b.client(authentication=pulsar.AuthenticationToken(token_b))
    try:
        on_b = cb.subscribe(TOPIC, "s")
        producer = ca.create_producer(TOPIC)

        def outbound() -> Any:
            stats = json.loads(a.admin("--output", "json", "topics", "stats", TOPIC))
            repl = stats["replication"].get("b")
            return repl is not None and repl["connected"] and repl["outboundConnection"]

        where = wait_until(outbound, timeout=60, what="a's replicator connected to b")
        assert where.endswith(f":{b.tls_port}")  # b's TLS port: pulsar+ssl
        for i in range(100):
            producer.send(b"s%03d" % i)
        got = []
        for _ in range(100):
            msg = on_b.receive(timeout_millis=60_000)
            on_b.acknowledge(msg)
            got.append(msg.data())
        assert got == [b"s%03d" % i for i in range(100)]
    finally:
        ca.close()
        cb.close()
