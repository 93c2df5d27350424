"""HTTP lookup (``/lookup/v2/topic/...``): its JSON shape, and the official client given an
``http://`` service URL (it looks topics and partitions up over HTTP) producing and
consuming, on a plain and on a partitioned topic created by the admin API."""

from __future__ import annotations

import json
import urllib.request

import pulsar

from tests.integration.admin.conftest import Admin
from tests.support.standalone import StandaloneProc


def test_lookup_answers_the_broker_urls(standalone: StandaloneProc) -> None:
    url = f"{standalone.http_url}/lookup/v2/topic/persistent/public/default/lk"
    with urllib.request.urlopen(url, timeout=10) as r:
        found = json.loads(r.read())
    assert found["brokerUrl"] == standalone.service_url
    assert found["httpUrl"] == standalone.http_url
    assert {"brokerUrlTls", "httpUrlTls"} <= set(found)


def test_official_client_over_http_service_url(admin: Admin, standalone: StandaloneProc) -> None:
    assert admin.put("/persistent/public/default/http-parts/partitions", 2)[0] == 204
    client = pulsar.Client(standalone.http_url, operation_timeout_seconds=15)
    try:
        for topic in ("persistent://public/default/http-plain",
                      "persistent://public/default/http-parts"):  # fmt: skip
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(
                topic,
                batching_enabled=False,
                message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
            )
            sent = {f"{topic}-{i}".encode() for i in range(6)}
            for data in sorted(sent):
                producer.send(data)
            got = set()
            for _ in sent:
                msg = consumer.receive(timeout_millis=10_000)
                got.add(msg.data())
                consumer.acknowledge(msg)
            assert got == sent
            producer.close()
            consumer.close()
        parts = admin.get("/persistent/public/default/http-parts/partitioned-stats")[1]
        assert parts["msgInCounter"] == 6
        assert all(p["msgInCounter"] == 3 for p in parts["partitions"].values())
    finally:
        client.close()
