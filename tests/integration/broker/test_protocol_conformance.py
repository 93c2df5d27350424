"""Fields of the broker's answers that the official clients depend on, checked on the wire
(regressions of issue 11: the Java client could not create a producer, PIP-344 was not
announced, MESSAGE ids had no partition index, schemas were not stored), plus the same
behaviour through the official Python client."""

from __future__ import annotations

import itertools
import json
import time
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest
from pulsar.schema import AvroSchema, Float, Integer, JsonSchema, Record, String

from magnetar.broker import schemas, topic_list
from magnetar.wire import commands, pb
from tests.support.raw_client import RawClient
from tests.support.standalone import StandaloneProc

_ids = itertools.count(1)
_C = pb.BaseCommand


@pytest.fixture
def raw(standalone: StandaloneProc) -> Iterator[RawClient]:
    c = RawClient(standalone.port)
    c.handshake()
    try:
        yield c
    finally:
        c.close()


def _admin_put(proc: StandaloneProc, path: str, body: object) -> None:
    req = urllib.request.Request(
        f"{proc.http_url}/admin/v2{path}", data=json.dumps(body).encode(), method="PUT"
    )
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status in (200, 204)


def _partitioned(proc: StandaloneProc, topic: str, n: int) -> str:
    _admin_put(proc, f"/persistent/public/default/{topic}/partitions", n)
    return f"persistent://public/default/{topic}"


def _producer(raw: RawClient, topic: str, schema: pb.Schema | None = None) -> pb.BaseCommand:
    cmd = commands.producer(topic=topic, producer_id=next(_ids), request_id=next(_ids))
    if schema is not None:
        cmd.producer.schema.CopyFrom(schema)
    return raw.request(cmd).command


def _avro(name: str, fields: list[str], *, optional: tuple[str, ...] = ()) -> pb.Schema:
    definition = {
        "type": "record",
        "name": name,
        "fields": [
            {"name": f, "type": ["null", "string"], "default": None}
            if f in optional
            else {"name": f, "type": "string"}
            for f in fields
        ],
    }
    return pb.Schema(name=name, schema_data=json.dumps(definition).encode(), type=pb.Schema.Avro)


# --- handshake --------------------------------------------------------------------------------


def test_connected_announces_what_is_implemented(standalone: StandaloneProc) -> None:
    c = RawClient(standalone.port)
    try:
        connected = c.handshake()
    finally:
        c.close()
    flags = connected.feature_flags
    assert flags.supports_get_partitioned_metadata_without_auto_creation
    assert flags.supports_topic_watchers
    # not implemented by this broker: never announced
    assert not flags.supports_repl_dedup_by_lid_and_eid


# --- PIP-344: partitioned metadata without auto-creation -------------------------------------


def _metadata(
    raw: RawClient, topic: str, *, auto_create: bool
) -> pb.CommandPartitionedTopicMetadataResponse:
    cmd = commands.partitioned_metadata(topic=topic, request_id=next(_ids))
    cmd.partitionMetadata.metadata_auto_creation_enabled = auto_create
    frame = raw.request(cmd)
    assert frame.type == _C.PARTITIONED_METADATA_RESPONSE
    return frame.command.partitionMetadataResponse


def test_partitioned_metadata_without_auto_creation(
    standalone: StandaloneProc, raw: RawClient, topic: str
) -> None:
    ok = pb.CommandPartitionedTopicMetadataResponse.Success
    missing = _metadata(raw, f"{topic}-missing", auto_create=False)
    assert missing.response == pb.CommandPartitionedTopicMetadataResponse.Failed
    assert missing.error == pb.TopicNotFound
    # nothing was created by asking: asked again, still missing
    assert _metadata(raw, f"{topic}-missing", auto_create=False).error == pb.TopicNotFound

    name = _partitioned(standalone, f"{topic}-parts", 3)
    answer = _metadata(raw, name, auto_create=False)
    assert (answer.response, answer.partitions) == (ok, 3)

    assert _producer(raw, f"{topic}-plain").type == _C.PRODUCER_SUCCESS
    answer = _metadata(raw, f"{topic}-plain", auto_create=False)
    assert (answer.response, answer.partitions) == (ok, 0)


# --- PRODUCER_SUCCESS and schemas ------------------------------------------------------------


def test_producer_success_always_has_a_schema_version(raw: RawClient, topic: str) -> None:
    answer = _producer(raw, topic)
    assert answer.type == _C.PRODUCER_SUCCESS
    assert answer.producer_success.HasField("schema_version")
    assert answer.producer_success.schema_version == schemas.NO_VERSION


def test_schema_versions(raw: RawClient, topic: str) -> None:
    v1 = _avro("Payment", ["id"])
    v2 = _avro("Payment", ["id", "merchant"], optional=("merchant",))
    first = _producer(raw, topic, v1).producer_success.schema_version
    assert schemas.decode_version(first) == 0
    assert _producer(raw, topic, v1).producer_success.schema_version == first
    second = _producer(raw, topic, v2).producer_success.schema_version
    assert schemas.decode_version(second) == 1

    def get(version: bytes | None) -> pb.CommandGetSchemaResponse:
        cmd = pb.BaseCommand(type=_C.GET_SCHEMA)
        cmd.getSchema.request_id = next(_ids)
        cmd.getSchema.topic = f"persistent://public/default/{topic}"
        if version is not None:
            cmd.getSchema.schema_version = version
        return raw.request(cmd).command.getSchemaResponse

    latest = get(None)
    assert not latest.HasField("error_code")
    assert (latest.schema_version, latest.schema.schema_data) == (second, v2.schema_data)
    old = get(first)
    assert (old.schema.type, old.schema.schema_data) == (pb.Schema.Avro, v1.schema_data)
    assert get(schemas.encode_version(7)).error_code == pb.TopicNotFound

    cmd = pb.BaseCommand(type=_C.GET_OR_CREATE_SCHEMA)
    cmd.getOrCreateSchema.request_id = next(_ids)
    cmd.getOrCreateSchema.topic = topic
    cmd.getOrCreateSchema.schema.CopyFrom(v1)
    assert raw.request(cmd).command.getOrCreateSchemaResponse.schema_version == first


def test_schema_of_a_topic_without_one_is_topic_not_found(raw: RawClient, topic: str) -> None:
    cmd = pb.BaseCommand(type=_C.GET_SCHEMA)
    cmd.getSchema.request_id = next(_ids)
    cmd.getSchema.topic = topic
    answer = raw.request(cmd).command.getSchemaResponse
    assert answer.error_code == pb.TopicNotFound


def test_garbage_schema_version_and_oversize_schema_are_refused(raw: RawClient, topic: str) -> None:
    cmd = pb.BaseCommand(type=_C.GET_SCHEMA)
    cmd.getSchema.request_id = next(_ids)
    cmd.getSchema.topic = topic
    cmd.getSchema.schema_version = b"\x01\x02\x03"
    assert raw.request(cmd).command.getSchemaResponse.error_code == pb.IncompatibleSchema
    huge = pb.Schema(
        name="big", schema_data=b"x" * (schemas.MAX_SCHEMA_BYTES + 1), type=pb.Schema.Json
    )
    answer = _producer(raw, topic, huge)
    assert answer.type == _C.ERROR
    assert answer.error.error == pb.IncompatibleSchema
    garbage = pb.Schema(name="g", schema_data=b"{not avro", type=pb.Schema.Avro)
    answer = _producer(raw, topic, garbage)
    assert (answer.error.error, "invalid schema" in answer.error.message) == (
        pb.IncompatibleSchema,
        True,
    )
    # the connection still works
    assert _producer(raw, topic).type == _C.PRODUCER_SUCCESS


class Payment(Record):
    id = String()
    merchant = String()
    amount = Float()
    count = Integer()


@pytest.mark.parametrize("schema_class", [AvroSchema, JsonSchema])
def test_official_client_schema_round_trip(
    client: pulsar.Client, topic: str, schema_class: type
) -> None:
    schema = schema_class(Payment)
    consumer = client.subscribe(
        topic, "sub", schema=schema, initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(topic, schema=schema)
    sent = [Payment(id=str(i), merchant=f"m{i % 3}", amount=i / 2, count=i) for i in range(20)]
    for p in sent:
        producer.send(p)
    got = []
    for _ in sent:
        msg = consumer.receive(timeout_millis=10_000)
        got.append(msg.value())
        consumer.acknowledge(msg)
    assert [(p.id, p.merchant, p.amount, p.count) for p in got] == [
        (p.id, p.merchant, p.amount, p.count) for p in sent
    ]


# --- partition index in MESSAGE ----------------------------------------------------------------


def test_message_ids_carry_the_partition_index(
    standalone: StandaloneProc, client: pulsar.Client, topic: str
) -> None:
    name = _partitioned(standalone, topic, 3)
    consumer = client.subscribe(name, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(name)
    for i in range(60):
        producer.send(f"m{i}".encode(), partition_key=f"key-{i}")
    seen: dict[int, int] = {}
    for _ in range(60):
        msg = consumer.receive(timeout_millis=10_000)
        partition = msg.message_id().partition()
        assert msg.topic_name().endswith(f"-partition-{partition}")
        seen[partition] = seen.get(partition, 0) + 1
        consumer.acknowledge(msg)
    assert sorted(seen) == [0, 1, 2]


def test_raw_message_on_a_partition_has_its_index(
    standalone: StandaloneProc, raw: RawClient, client: pulsar.Client, topic: str
) -> None:
    name = _partitioned(standalone, topic, 2)
    producer = client.create_producer(f"{name}-partition-1")
    producer.send(b"hello")
    sub = commands.subscribe(
        topic=f"{name}-partition-1",
        subscription="raw",
        consumer_id=1,
        request_id=next(_ids),
        initial_position=pb.CommandSubscribe.Earliest,
    )
    assert raw.request(sub).type == _C.SUCCESS
    raw.command(commands.flow(consumer_id=1, permits=10))
    frame = raw.request(commands.ping())
    while frame.type != _C.MESSAGE:
        frame = raw.read()
    assert frame.command.message.message_id.partition == 1


def test_reader_loop_on_one_partition_ends(
    standalone: StandaloneProc, client: pulsar.Client, topic: str
) -> None:
    """``while reader.has_message_available(): reader.read_next()`` on ``-partition-0`` of a
    keyed partitioned topic reads that partition's messages and then stops."""
    name = _partitioned(standalone, topic, 3)
    producer = client.create_producer(name, batching_enabled=True)
    for i in range(3000):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"key-{i % 97}")
    producer.flush()
    reader = client.create_reader(f"{name}-partition-0", pulsar.MessageId.earliest)
    read = 0
    deadline = time.monotonic() + 60
    while reader.has_message_available():
        reader.read_next(timeout_millis=10_000)
        read += 1
        assert time.monotonic() < deadline, f"the loop did not end after {read} messages"
        assert read <= 3000
    reader.close()
    stats = json.loads(
        standalone.get(f"/admin/v2/persistent/public/default/{topic}-partition-0/stats")
    )
    assert read == stats["msgInCounter"] > 0


# --- topic list watchers ----------------------------------------------------------------------


def test_topic_list_watcher_follows_creations_and_deletions(
    standalone: StandaloneProc, raw: RawClient, client: pulsar.Client, topic: str
) -> None:
    client.create_producer(f"{topic}-a").close()
    client.create_producer(f"other-{topic}").close()
    cmd = pb.BaseCommand(type=_C.WATCH_TOPIC_LIST)
    w = cmd.watchTopicList
    w.request_id, w.watcher_id = next(_ids), 7
    w.namespace = "public/default"
    w.topics_pattern = f"persistent://public/default/{topic}-.*"
    answer = raw.request(cmd)
    assert answer.type == _C.WATCH_TOPIC_LIST_SUCCESS
    first = [f"persistent://public/default/{topic}-a"]
    assert list(answer.command.watchTopicListSuccess.topic) == first
    assert answer.command.watchTopicListSuccess.topics_hash == topic_list.topics_hash(first)

    client.create_producer(f"{topic}-b").close()
    _partitioned(standalone, f"{topic}-p", 2)
    client.create_producer(f"not-{topic}-c").close()  # does not match
    added: set[str] = set()
    update = None
    while len(added) < 3:
        frame = raw.read(timeout=10)
        assert frame.type == _C.WATCH_TOPIC_UPDATE
        update = frame.command.watchTopicUpdate
        assert update.watcher_id == 7
        assert not update.deleted_topics
        added.update(update.new_topics)
    base = f"persistent://public/default/{topic}"
    assert added == {f"{base}-b", f"{base}-p-partition-0", f"{base}-p-partition-1"}
    assert update is not None
    assert update.topics_hash == topic_list.topics_hash([*first, *added])

    req = urllib.request.Request(
        f"{standalone.http_url}/admin/v2/persistent/public/default/{topic}-b", method="DELETE"
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 204
    frame = raw.read(timeout=10)
    assert frame.type == _C.WATCH_TOPIC_UPDATE
    assert list(frame.command.watchTopicUpdate.deleted_topics) == [f"{base}-b"]

    close = pb.BaseCommand(type=_C.WATCH_TOPIC_LIST_CLOSE)
    close.watchTopicListClose.request_id = next(_ids)
    close.watchTopicListClose.watcher_id = 7
    assert raw.request(close).type == _C.SUCCESS
    client.create_producer(f"{topic}-d").close()
    answer = raw.request(commands.ping(), timeout=5)
    assert answer.type == _C.PONG  # nothing more from the closed watcher


def test_topic_list_watcher_bad_input(raw: RawClient) -> None:
    for namespace, pattern, code in [
        ("no-slash", "persistent://x/y/.*", pb.InvalidTopicName),
        ("public/default", "persistent://public/default/[", pb.NotAllowedError),
        ("public/default", "ftp://public/default/.*", pb.NotAllowedError),
    ]:
        cmd = pb.BaseCommand(type=_C.WATCH_TOPIC_LIST)
        w = cmd.watchTopicList
        w.request_id, w.watcher_id = next(_ids), next(_ids)
        w.namespace, w.topics_pattern = namespace, pattern
        answer = raw.request(cmd)
        assert answer.type == _C.ERROR
        assert answer.command.error.error == code
    assert raw.request(commands.ping()).type == _C.PONG


# --- WaitForExclusive and supports_partial_producer ------------------------------------------


@pytest.mark.parametrize("partial", [True, False])
def test_queued_producer_is_announced_only_to_clients_that_support_it(
    standalone: StandaloneProc, topic: str, partial: bool
) -> None:
    holder = RawClient(standalone.port)
    waiter = RawClient(standalone.port)
    try:
        holder.handshake()
        connect = commands.connect(client_version="raw-test", protocol_version=21)
        connect.connect.feature_flags.supports_partial_producer = partial
        assert waiter.request(connect).type == _C.CONNECTED
        first = commands.producer(
            topic=topic, producer_id=1, request_id=1, access_mode=pb.Exclusive
        )
        assert holder.request(first).type == _C.PRODUCER_SUCCESS
        second = commands.producer(
            topic=topic, producer_id=1, request_id=2, access_mode=pb.WaitForExclusive
        )
        waiter.command(second)
        if partial:
            queued = waiter.read().command.producer_success
            assert (queued.request_id, queued.producer_ready) == (2, False)
        else:
            with pytest.raises(AssertionError, match="no frame"):
                waiter.read(timeout=1.0)
        close = pb.BaseCommand(type=_C.CLOSE_PRODUCER)
        close.close_producer.producer_id, close.close_producer.request_id = 1, 3
        assert holder.request(close).type == _C.SUCCESS
        ready = waiter.read().command.producer_success
        assert (ready.request_id, ready.producer_ready) == (2, True)
    finally:
        holder.close()
        waiter.close()


# --- schema compatibility -----------------------------------------------------------------------


def _namespace(standalone: StandaloneProc, name: str, policies: dict[str, object]) -> str:
    _admin_put(standalone, f"/namespaces/public/{name}", policies)
    return f"persistent://public/{name}"


def test_incompatible_schema_is_refused_under_the_default_full_strategy(
    raw: RawClient, topic: str
) -> None:
    assert _producer(raw, topic, _avro("Payment", ["id"])).type == _C.PRODUCER_SUCCESS
    # a new field without a default: the new schema cannot read old data (BACKWARD fails)
    answer = _producer(raw, topic, _avro("Payment", ["id", "merchant"]))
    assert answer.type == _C.ERROR
    assert answer.error.error == pb.IncompatibleSchema
    assert "merchant" in answer.error.message
    # a change of type
    other = pb.Schema(name="s", schema_data=b"", type=pb.Schema.String)
    assert _producer(raw, topic, other).error.error == pb.IncompatibleSchema
    # a consumer with an incompatible schema is refused too; the first schema still works
    sub = commands.subscribe(topic=topic, subscription="s", consumer_id=9, request_id=next(_ids))
    sub.subscribe.schema.CopyFrom(_avro("Payment", ["id", "merchant"]))
    assert raw.request(sub).command.error.error == pb.IncompatibleSchema
    assert _producer(raw, topic, _avro("Payment", ["id"])).type == _C.PRODUCER_SUCCESS


@pytest.mark.parametrize(
    ("strategy", "accepted"),
    [
        # v1 {id}; then v2 {id, merchant with a default}; then v3 {merchant optional} (drops id)
        ("ALWAYS_COMPATIBLE", [True, True]),
        ("ALWAYS_INCOMPATIBLE", [False, False]),
        ("BACKWARD", [True, True]),  # v3 reads v2 data (id ignored)
        ("FORWARD", [True, False]),  # v2 readers need id, v3 data lacks it
        ("FULL", [True, False]),
        ("BACKWARD_TRANSITIVE", [True, True]),
    ],
)
def test_compatibility_strategies(
    standalone: StandaloneProc, raw: RawClient, topic: str, strategy: str, accepted: list[bool]
) -> None:
    ns = _namespace(standalone, f"schemas-{strategy.lower()}", {})
    _admin_put(
        standalone,
        f"/namespaces/public/schemas-{strategy.lower()}/schemaCompatibilityStrategy",
        strategy,
    )
    name = f"{ns}/{topic}"
    assert _producer(raw, name, _avro("P", ["id"])).type == _C.PRODUCER_SUCCESS
    v2 = _avro("P", ["id", "merchant"], optional=("merchant",))
    v3 = _avro("P", ["merchant"], optional=("merchant",))
    got = [_producer(raw, name, s).type == _C.PRODUCER_SUCCESS for s in (v2, v3)]
    assert got == accepted


def test_auto_update_disabled_and_validation_enforced(
    standalone: StandaloneProc, raw: RawClient, topic: str
) -> None:
    ns = _namespace(
        standalone,
        "schemas-locked",
        {"is_allow_auto_update_schema": False, "schema_validation_enforced": True},
    )
    name = f"{ns}/{topic}"
    v1 = _avro("P", ["id"])
    assert _producer(raw, name, v1).type == _C.PRODUCER_SUCCESS  # the first one may be added
    v2 = _avro("P", ["id", "merchant"], optional=("merchant",))
    answer = _producer(raw, name, v2)
    assert answer.error.error == pb.IncompatibleSchema
    assert "auto updating is disabled" in answer.error.message
    assert _producer(raw, name, v1).type == _C.PRODUCER_SUCCESS  # an existing one is fine
    answer = _producer(raw, name)  # no schema on a topic with one
    assert answer.error.error == pb.IncompatibleSchema
    assert "SchemaValidationEnforced" in answer.error.message
