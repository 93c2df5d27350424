"""Batch reads and writes of the ``magnetar`` data source in Spark local mode against a real
standalone: a partitioned topic read back row for row, starting/ending offsets, bad input
refused at load() naming the problem, a batch write routed by key, and a write given a
reader's options and the producer options (compression, batching, key column, routing,
producer name and sequence ids, deduplicated by the broker)."""

from __future__ import annotations

import datetime
from typing import Any

import pulsar
import pytest

from tests.integration.spark.conftest import (
    create_topic,
    make_namespace,
    read_all,
    source_options,
)
from tests.support.standalone import StandaloneProc, admin_call

NS = "public/spark-batch"


def _produce(client: pulsar.Client, topic: str, n: int, *, batching: bool) -> list[Any]:
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_messages=4, batching_max_publish_delay_ms=50
    )
    ids: list[Any] = []
    for i in range(n):
        kwargs: dict[str, Any] = dict(
            partition_key=f"k{i % 7}",
            properties={"i": str(i)},
            event_timestamp=1_700_000_000_000 + i,
        )
        if batching:
            producer.send_async(f"v{i}".encode(), lambda res, mid: ids.append(mid), **kwargs)
        else:
            ids.append(producer.send(f"v{i}".encode(), **kwargs))
    producer.flush()
    producer.close()
    return ids


@pytest.mark.parametrize("read_path", ["protocol", "client"])
def test_batch_read_of_a_partitioned_topic_returns_exactly_the_produced_rows(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client, read_path: str
) -> None:
    make_namespace(standalone, NS)
    topic = f"persistent://{NS}/orders-{read_path}"
    create_topic(standalone, f"{NS}/orders-{read_path}", 2)
    _produce(client, topic, 60, batching=True)

    options = source_options(standalone, topic=topic, readPath=read_path)
    df = spark.read.format("magnetar").options(**options).load()
    assert df.rdd.getNumPartitions() == 2  # one input partition per topic partition
    rows = df.collect()
    assert len(rows) == 60
    got = {
        (r.key, bytes(r.value), r.properties["i"], r.eventTime, r.topic, r.partition) for r in rows
    }
    assert {x[1] for x in got} == {f"v{i}".encode() for i in range(60)}
    for key, value, i, event_time, parent, partition in got:
        assert value == f"v{i}".encode() and key == f"k{int(i) % 7}"
        assert event_time == datetime.datetime(2023, 11, 14, 22, 13, 20) + datetime.timedelta(
            milliseconds=int(i)
        )
        assert parent == topic and partition in (0, 1)
    # a key lives on one partition; ids are unique and deserialise to the client's ids
    assert all(len({r.partition for r in rows if r.key == k}) == 1 for k in {r.key for r in rows})
    assert len({r.messageIdString for r in rows}) == 60
    mid = pulsar.MessageId.deserialize(bytes(rows[0].messageId))
    assert rows[0].messageIdString == (
        f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}:{rows[0].partition}"
    )
    assert all(r.producerName and r.publishTime for r in rows)


def test_starting_and_ending_offsets(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client
) -> None:
    make_namespace(standalone, NS)
    topic = f"persistent://{NS}/ranged"
    ids = _produce(client, topic, 12, batching=False)

    def read(**extra: str) -> list[str]:
        opts = source_options(standalone, topic=topic, **extra)
        rows = spark.read.format("magnetar").options(**opts).load().collect()

        def position(r: Any) -> list[int]:  # (numerically: ledger 10 after ledger 9)
            return [int(part) for part in r.messageIdString.split(":")]

        return [bytes(r.value).decode() for r in sorted(rows, key=position)]

    def at(i: int) -> str:
        return (
            f'{{"{topic}": {{"ledgerId": {ids[i].ledger_id()}, "entryId": {ids[i].entry_id()}}}}}'
        )

    assert read() == [f"v{i}" for i in range(12)]
    assert read(startingOffsets=at(3), endingOffsets=at(9)) == [f"v{i}" for i in range(3, 9)]
    assert read(startingOffsets=at(7)) == [f"v{i}" for i in range(7, 12)]
    assert read(endingOffsets=at(2)) == ["v0", "v1"]
    assert read(startingOffsets="latest") == []
    assert read(startingOffsets=f'{{"{topic}": "earliest"}}', endingOffsets="latest") == [
        f"v{i}" for i in range(12)
    ]


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"topic": "nope-never-created"}, "does not exist"),
        ({"topic": "x", "starting": "earliest"}, "unknown option(s) for magnetar reads: starting"),
        ({"topic": "x", "startingOffsets": "{not json"}, "startingOffsets is neither"),
        ({"topic": "x", "endingOffsets": '{"x": {"ledgerId": "a"}}'}, "the offset of 'x'"),
        ({"topic": "x", "serviceUrl": "pulsar://127.0.0.1:1"}, "serviceUrl pulsar://127.0.0.1:1"),
        ({"topic": "x", "adminUrl": "http://127.0.0.1:1"}, "adminUrl http://127.0.0.1:1"),
        ({"topics": ""}, "exactly one of the options topic, topics, topicsPattern"),
        ({"topic": "x", "topicsPattern": "x.*"}, "exactly one of the options"),
        ({"topic": "x", "readPath": "fast"}, "option readPath must be protocol or client"),
    ],
)
def test_bad_input_is_refused_at_load_naming_the_problem(
    standalone: StandaloneProc, spark: Any, extra: dict[str, str], problem: str
) -> None:
    make_namespace(standalone, "public/default")
    create_topic(standalone, "public/default/x")
    jobs_before = spark.sparkContext.statusTracker().getJobIdsForGroup(None)
    with pytest.raises(Exception) as err:
        spark.read.format("magnetar").options(**{**source_options(standalone), **extra}).load()
    assert problem in str(err.value)
    # refused at load(), before any job
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(None) == jobs_before


def test_batch_write_maps_columns_and_routes_by_key(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client
) -> None:
    make_namespace(standalone, NS)
    topic = f"persistent://{NS}/sink"
    create_topic(standalone, f"{NS}/sink", 3)
    when = datetime.datetime(2024, 1, 2, 3, 4, 5)
    rows = [
        (f"key{i % 5}", f"payload{i}".encode(), {"n": str(i)}, when + datetime.timedelta(seconds=i))
        for i in range(40)
    ]
    df = spark.createDataFrame(
        rows, "key string, value binary, properties map<string,string>, eventTime timestamp"
    )
    df.write.format("magnetar").option("serviceUrl", standalone.service_url).option(
        "topic", topic
    ).mode("append").save()

    stored = {}
    for p in range(3):
        for msg in read_all(client, f"{topic}-partition-{p}"):
            stored[msg.data()] = (p, msg.partition_key(), msg.properties(), msg.event_timestamp())
    assert set(stored) == {f"payload{i}".encode() for i in range(40)}
    epoch = datetime.datetime(1970, 1, 1)
    for i in range(40):
        p, key, props, event_ms = stored[f"payload{i}".encode()]
        assert key == f"key{i % 5}" and props == {"n": str(i)}
        assert event_ms == int(
            (when + datetime.timedelta(seconds=i) - epoch).total_seconds() * 1000
        )
    by_key = {}
    for p, key, _, _ in stored.values():
        by_key.setdefault(key, set()).add(p)
    assert all(len(parts) == 1 for parts in by_key.values())  # one key, one partition

    bad = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception, match="column value has type int"):
        bad.write.format("magnetar").option("serviceUrl", standalone.service_url).option(
            "topic", topic
        ).mode("append").save()


def test_a_write_takes_a_readers_options_and_the_producer_options(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client
) -> None:
    ns = "public/spark-write-options"
    make_namespace(standalone, ns, dedup=True)
    topic = f"persistent://{ns}/orders"
    create_topic(standalone, f"{ns}/orders", 3)
    n, payload = 60, b"x" * 2000
    rows = [(f"acct{i % 6}", payload + str(i).encode(), i + 1) for i in range(n)]
    df = spark.createDataFrame(rows, "account string, value binary, sequenceId long")
    options = {
        **source_options(standalone),  # serviceUrl and adminUrl, as a read takes them
        "startingOffsets": "earliest",  # read-only options: accepted, not used
        "pollTimeoutMs": "5000",
        "readPath": "client",
        "topic": topic,
        "compressionType": "ZSTD",
        "batchingEnabled": "true",
        "batchingMaxMessages": "10",
        "batchingMaxPublishDelayMs": "100",
        "keyColumn": "account",
        "producerName": "orders-copy",
    }
    for _ in range(2):  # the second write re-sends every sequence id: all dropped
        df.write.format("magnetar").options(**options).mode("append").save()

    stored: dict[bytes, tuple[int, str, Any]] = {}
    for p in range(3):
        for msg in read_all(client, f"{topic}-partition-{p}"):
            assert msg.data() not in stored, "a row stored twice"
            stored[msg.data()] = (p, msg.partition_key(), msg.message_id())
    assert set(stored) == {payload + str(i).encode() for i in range(n)}
    for i in range(n):
        assert stored[payload + str(i).encode()][1] == f"acct{i % 6}"  # the key column
    by_key: dict[str, set[int]] = {}
    for p, key, _ in stored.values():
        by_key.setdefault(key, set()).add(p)
    assert all(len(parts) == 1 for parts in by_key.values())  # routed by the key's hash
    assert any(mid.batch_index() > 0 for _, _, mid in stored.values())  # batched
    stats = admin_call(standalone.http_url, "GET", f"/persistent/{ns}/orders/partitioned-stats")
    assert stats["storageSize"] < n * len(payload) // 10  # stored compressed (ZSTD)
    # the same options read the topic back (the producer options are a read's to ignore)
    assert spark.read.format("magnetar").options(**options).load().count() == n


@pytest.mark.parametrize(("mode", "partitions_used"), [("SinglePartition", 1), ("", 3)])
def test_a_write_routes_keyless_rows_by_the_routing_mode(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client, mode: str, partitions_used: int
) -> None:
    ns = "public/spark-write-routing"
    make_namespace(standalone, ns)
    name = f"routed-{mode or 'default'}"
    topic = f"persistent://{ns}/{name}"
    create_topic(standalone, f"{ns}/{name}", 3)
    df = spark.createDataFrame([(f"v{i}",) for i in range(30)], "value string").coalesce(1)
    options = {"serviceUrl": standalone.service_url, "topic": topic, "batchingEnabled": "false"}
    if mode:
        options["messageRoutingMode"] = mode
    df.write.format("magnetar").options(**options).mode("append").save()
    counts = [len(read_all(client, f"{topic}-partition-{p}")) for p in range(3)]
    assert sum(counts) == 30
    assert sum(1 for c in counts if c) == partitions_used  # round robin: every partition


def _user_record(*, with_email: bool) -> type:
    from pulsar import schema as ps

    fields: dict[str, Any] = {"name": ps.String(), "age": ps.Integer()}
    if with_email:
        fields["email"] = ps.String(required_default=True)  # a default: FULL-compatible
    return type("User", (ps.Record,), fields)


@pytest.mark.parametrize("read_path", ["protocol", "client"])
def test_value_schema_auto_decodes_each_version_with_the_registrys_schemas(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client, read_path: str
) -> None:
    """Avro values written under two versions of a topic's schema (the second adds a field)
    read as the latest: the first version's rows get the new field's default (null)."""
    from pulsar import schema as ps

    make_namespace(standalone, NS)
    name = f"users-{read_path}"
    topic = f"persistent://{NS}/{name}"
    create_topic(standalone, f"{NS}/{name}", 2)
    v1, v2 = _user_record(with_email=False), _user_record(with_email=True)
    for record, batching, rows in (
        (v1, True, [v1(name=f"u{i}", age=20 + i) for i in range(6)]),
        (v2, False, [v2(name=f"w{i}", age=40 + i, email=f"w{i}@x") for i in range(6)]),
    ):
        producer = client.create_producer(
            topic, schema=ps.AvroSchema(record), batching_enabled=batching
        )
        for row in rows:
            producer.send(row, partition_key=row.name)
        producer.close()
    versions = admin_call(standalone.http_url, "GET", f"/schemas/{NS}/{name}/schemas")
    assert len(versions["getSchemaResponses"]) == 2

    options = source_options(standalone, topic=topic, readPath=read_path, valueSchema="auto")
    df = spark.read.format("magnetar").options(**options).load()
    assert dict(df.dtypes)["value"] == "struct<name:string,age:int,email:string>"
    got = {(r.value.name, r.value.age, r.value.email, r.key) for r in df.collect()}
    assert got == {(f"u{i}", 20 + i, None, f"u{i}") for i in range(6)} | {
        (f"w{i}", 40 + i, f"w{i}@x", f"w{i}") for i in range(6)
    }
    flat = df.select("value.name", "value.age").where("value.age >= 40").count()
    assert flat == 6


def test_value_schema_auto_decodes_string_and_json_schemas_and_refuses_a_topic_without_one(
    standalone: StandaloneProc, spark: Any, client: pulsar.Client
) -> None:
    from pulsar import schema as ps

    make_namespace(standalone, NS)
    names = f"persistent://{NS}/names"
    producer = client.create_producer(names, schema=ps.StringSchema())
    for i in range(5):
        producer.send(f"né{i}")
    producer.close()
    options = source_options(standalone, topic=names, valueSchema="auto")
    df = spark.read.format("magnetar").options(**options).load()
    assert dict(df.dtypes)["value"] == "string"
    assert sorted(r.value for r in df.collect()) == [f"né{i}" for i in range(5)]

    people = f"persistent://{NS}/people"
    user = _user_record(with_email=True)
    producer = client.create_producer(people, schema=ps.JsonSchema(user))
    producer.send(user(name="j", age=7, email=None))
    producer.close()
    options = source_options(standalone, topic=people, valueSchema="auto", readPath="client")
    df = spark.read.format("magnetar").options(**options).load()
    assert [r.value.asDict() for r in df.collect()] == [{"name": "j", "age": 7, "email": None}]

    raw = f"persistent://{NS}/raw-bytes"
    _produce(client, raw, 2, batching=False)
    with pytest.raises(Exception, match=f"topic {raw} has no schema: valueSchema=auto"):
        spark.read.format("magnetar").options(
            **source_options(standalone, topic=raw, valueSchema="auto")
        ).load()
    with pytest.raises(Exception, match="option valueSchema must be bytes or auto"):
        spark.read.format("magnetar").options(
            **source_options(standalone, topic=raw, valueSchema="avro")
        ).load()
