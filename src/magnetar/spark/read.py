"""Reading topics into Spark: the driver plans one input partition per topic partition (a
range of message ids, from the admin API's last message id and ledger list), an executor reads
its range on the Pulsar protocol itself (``protocol_read``, option ``readPath=protocol``, the
default) or with the official client's Reader (``read_range`` here: ``readPath=client``, and
the protocol loop's fallback). Batch reads (``spark.read``) and micro-batch streaming
(``spark.readStream``) share the planning and the read loops.

A range is ``(after, until)``: every message whose position is greater than ``after`` and at
most ``until`` (``options.Position`` ordering). Streaming offsets are, per topic partition,
the position of the last message a micro-batch included (``-1:-1:-1``: none yet), optionally
followed by ``:N`` when that message closed its ledger and ledger ``N`` follows it (so a
trimmed, fully read ledger is not mistaken for data loss)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from magnetar.spark import options as opts
from magnetar.spark import protocol_read, values
from magnetar.spark.access import ALL_NAMES as ACCESS_OPTION_NAMES
from magnetar.spark.access import ANONYMOUS, Access
from magnetar.spark.admin import (
    Admin,
    PartitionState,
    TopicNotFound,
    check_reachable,
    check_service,
)
from magnetar.spark.options import BEFORE_ALL, MAX_BATCH, MagnetarSourceError, Position
from magnetar.spark.rows import (
    ARROW_BATCH_ROWS,
    SCHEMA,
    Columns,
    Range,
    arrow_schema,
    parent_and_index,
    poll_timeout_message,
    spark_schema,
)

__all__ = ["ARROW_BATCH_ROWS", "SCHEMA", "BatchReader", "Range", "StreamReader", "read_range"]

log = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_MS = 30_000


class DataLossError(MagnetarSourceError):
    """Messages the checkpoint still had to read are no longer stored."""


@dataclass(frozen=True)
class Settings:
    """The read options, checked."""

    service_url: str
    admin_url: str
    selector: opts.Selector
    starting: opts.OffsetsOption
    ending: opts.OffsetsOption
    poll_timeout_ms: int
    fail_on_data_loss: bool
    subscription: str | None
    max_records: int | None
    max_bytes: int | None
    read_path: str
    access: Access
    value_schema: str = values.VALUE_SCHEMA_BYTES
    readers: Mapping[str, values.Reader] = field(default_factory=dict)
    """valueSchema=auto: per topic read (partitioned: its base name), the reader schema."""

    @classmethod
    def check(cls, options: Mapping[str, str]) -> StructType:
        """What load() can check without knowing batch or streaming: the options, the URLs,
        the topics and the partitions the offsets name; the rows' schema."""
        settings = cls.parse(options, streaming=None)
        admin = settings.admin()
        partitions = settings.resolve(admin)
        settings.check_offsets_name_known_partitions(partitions)
        return settings.with_readers(admin, partitions).schema()

    def with_readers(self, admin: Admin, partitions: Sequence[str]) -> Settings:
        """With valueSchema=auto: these settings with the reader schema of each topic read
        (they must give ``value`` one type)."""
        if self.value_schema != values.VALUE_SCHEMA_AUTO:
            return self
        readers: dict[str, values.Reader] = {}
        for topic in dict.fromkeys(parent_and_index(p)[0] for p in partitions):
            readers[topic] = values.Reader.of(
                values.versions(admin.schemas(topic) or {"getSchemaResponses": []}, topic),
                topic,
            )
        if not readers and self.selector.pattern is None:
            raise MagnetarSourceError("valueSchema=auto: no topic to take the schema from")
        kinds = {topic: r.spark_type(topic).simpleString() for topic, r in readers.items()}
        if len(set(kinds.values())) > 1:
            raise MagnetarSourceError(
                "valueSchema=auto: the topics read have different value types ("
                + "; ".join(f"{t}: {k}" for t, k in kinds.items())
                + "); read them separately"
            )
        return replace(self, readers=readers)

    def value_type(self) -> Any:
        """The Spark type of ``value`` when decoded (None: the payload's bytes)."""
        if self.value_schema != values.VALUE_SCHEMA_AUTO or not self.readers:
            return None
        topic, reader = next(iter(self.readers.items()))
        return reader.spark_type(topic)

    def schema(self) -> StructType:
        return spark_schema(self.value_type())

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool | None) -> Settings:
        opts.check_known(
            options,
            opts.READ_OPTION_NAMES + opts.PRODUCER_OPTION_NAMES + ACCESS_OPTION_NAMES,
            what="reads",
        )  # a write's producer options too: one set of options serves both (ignored here)
        if streaming is False:
            for name in ("maxRecordsPerTrigger", "maxBytesPerTrigger", "subscriptionName"):
                if options.get(name.lower()):
                    raise MagnetarSourceError(f"option {name} applies to streaming reads only")
        elif streaming and options.get("endingoffsets"):
            raise MagnetarSourceError("option endingOffsets applies to batch reads only")
        service = opts.service_url(options)
        admin = opts.admin_url(options, required=True)
        assert admin is not None
        settings = cls(
            service_url=service,
            admin_url=admin,
            selector=opts.selector(options),
            starting=opts.offsets_option(
                options, "startingOffsets", default=opts.EARLIEST if not streaming else opts.LATEST
            ),
            ending=opts.offsets_option(options, "endingOffsets", default=opts.LATEST),
            poll_timeout_ms=opts.positive_int(options, "pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
            fail_on_data_loss=opts.boolean(options, "failOnDataLoss", default=True),
            subscription=(options.get("subscriptionname") or "").strip() or None,
            max_records=opts.positive_int(options, "maxRecordsPerTrigger"),
            max_bytes=opts.positive_int(options, "maxBytesPerTrigger"),
            read_path=opts.read_path(options),
            access=Access.parse(options),
            value_schema=values.value_schema(options),
        )
        if settings.max_records and settings.max_bytes:
            raise MagnetarSourceError(
                "set one of maxRecordsPerTrigger and maxBytesPerTrigger, not both"
            )
        if settings.ending.default == opts.EARLIEST and not settings.ending.per_partition:
            raise MagnetarSourceError("endingOffsets=earliest would read nothing")
        check_reachable(settings.admin_url, what="adminUrl")
        check_service(settings.service_url, settings.access)
        return settings

    def admin(self) -> Admin:
        return Admin.at(self.admin_url, self.access)

    def resolve(self, admin: Admin) -> list[str]:
        """The topic partitions selected now (fixed topics must exist)."""
        if self.selector.pattern is None:
            found: list[str] = []
            for topic in self.selector.topics:
                found.extend(admin.expand(topic))
            return found
        return [
            p
            for p in admin.namespace_topics(self.selector.namespace)
            if self.selector.matches(p) or self.selector.matches(parent_and_index(p)[0])
        ]

    def check_offsets_name_known_partitions(self, partitions: Sequence[str]) -> None:
        known = set(partitions) | {parent_and_index(p)[0] for p in partitions}
        for option, label in ((self.starting, "startingOffsets"), (self.ending, "endingOffsets")):
            for topic in option.per_partition:
                if topic not in known:
                    raise MagnetarSourceError(
                        f"{label} names {topic}, which is not among the topics read "
                        f"({', '.join(partitions) or 'none'})"
                    )


def _spec(option: opts.OffsetsOption, partition: str) -> opts.OffsetSpec:
    if partition in option.per_partition:
        return option.per_partition[partition]
    return option.spec(parent_and_index(partition)[0])


def start_after(spec: opts.OffsetSpec, state: PartitionState) -> Position:
    """The exclusive start of a read from a startingOffsets spec."""
    if spec == opts.EARLIEST:
        return BEFORE_ALL
    if spec == opts.LATEST:
        return state.last or BEFORE_ALL
    assert isinstance(spec, Position)
    return Position(spec.ledger, spec.entry, spec.batch - 1)  # inclusive start -> exclusive


def end_until(spec: opts.OffsetSpec, state: PartitionState) -> Position | None:
    """The inclusive end of a batch read from an endingOffsets spec (None: read nothing)."""
    if state.last is None or spec == opts.EARLIEST:
        return None
    if spec == opts.LATEST:
        return state.last
    assert isinstance(spec, Position)
    if spec > state.last:
        return state.last
    return Position(spec.ledger, spec.entry, spec.batch - 1)  # exclusive end -> inclusive


# --- executors ----------------------------------------------------------------------------------


def read_range(
    service_url: str,
    r: Range,
    *,
    poll_timeout_ms: int,
    access: Access = ANONYMOUS,
    versions: bool = False,
) -> Iterator[Any]:
    """Every message of ``r`` in order, as Arrow record batches of ``SCHEMA`` (at most
    ``ARROW_BATCH_ROWS`` rows each); ``versions``: with each row's schema version
    (``rows.arrow_schema``).

    The loop does per message only what the row needs from the client: the messages of one
    stored entry (a producer batch) share the entry's metadata, so its publish time and
    producer name are read once per entry; the id string, the times and the constant columns
    are computed by Arrow per batch."""
    import pulsar  # the executors' dependency, imported where it runs

    schema = arrow_schema(versions=versions)
    after = tuple(Position.parse(r.after))
    until = tuple(Position.parse(r.until))
    if until <= after:
        return
    parent, index = parent_and_index(r.topic)
    ledger, entry, batch = after
    if ledger < 0 or entry < 0:
        start, inclusive = pulsar.MessageId.earliest, True
    elif batch in (-1, MAX_BATCH):
        start, inclusive = pulsar.MessageId(index, ledger, entry, -1), False
    else:  # inside an entry: from the entry, the messages up to ``after`` skipped below
        start, inclusive = pulsar.MessageId(index, ledger, entry, -1), True
    client = pulsar.Client(
        service_url,
        **access.official_client_options(),
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        try:
            reader = client.create_reader(
                r.topic, start, receiver_queue_size=5000, start_message_id_inclusive=inclusive
            )
        except pulsar.PulsarException as err:  # AuthorizationError, ...
            raise MagnetarSourceError(
                f"reading {r.topic}: the broker refused: {type(err).__name__}: {err}"
            ) from None
        # the client's extension object: its read_next returns the messages without the
        # Python wrapper per message (the wrapper has the same methods, so either works)
        read_next = getattr(reader, "_reader", reader).read_next
        timeout = pulsar.Timeout
        cols = Columns(parent, index)
        add_row, ids, batches = cols.add_row, cols.ids.append, cols.batches.append
        last_entry: tuple[int, int] | None = None
        count = 0
        while True:
            try:
                msg = read_next(poll_timeout_ms)
            except timeout:
                raise MagnetarSourceError(
                    poll_timeout_message(r.topic, Position(*after), r.until, poll_timeout_ms)
                ) from None
            mid = msg.message_id()
            ledger, entry, batch = pos = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
            if pos <= after:
                continue  # before the range, or delivered again after a reconnection
            if pos > until:
                break
            if (ledger, entry) != last_entry:
                last_entry = (ledger, entry)
                cols.start_entry(
                    ledger,
                    entry,
                    msg.publish_timestamp(),
                    msg.producer_name(),
                    version=_schema_version(msg) if versions else -1,
                )
            props = msg.properties()
            add_row(
                msg.partition_key() or None,
                msg.data(),
                msg.event_timestamp(),
                list(props.items()) if props else [],
            )
            ids(mid.serialize())
            batches(batch)
            after = pos  # strictly increasing: no message is yielded twice
            if pos == until:
                break
            count += 1
            if count == ARROW_BATCH_ROWS:
                yield cols.batch(schema)
                cols = Columns(parent, index)
                add_row, ids, batches = cols.add_row, cols.ids.append, cols.batches.append
                last_entry, count = None, 0
        if cols.rows:
            yield cols.batch(schema)
        reader.close()
    finally:
        client.close()


def read_partition(settings: Settings, partition: InputPartition) -> Iterator[Any]:
    """An input partition's messages as Arrow batches (both readers' ``read``); with
    valueSchema=auto, their values decoded (``values.Decoder``)."""
    if not isinstance(partition, Range):
        return  # nothing planned: Spark still runs one task without a partition
    value_type = settings.value_type()
    if value_type is None:
        yield from _read_partition(settings, partition, versions=False)
        return
    from pyspark.sql.pandas.types import to_arrow_type

    topic = parent_and_index(partition.topic)[0]
    history = values.versions(settings.admin().schemas(topic) or {"getSchemaResponses": []}, topic)
    reader = settings.readers.get(topic) or values.Reader.of(history, topic)  # (a new topic)
    decoder = values.Decoder(reader, history, topic)
    if decoder.kind != value_type:
        raise MagnetarSourceError(
            f"valueSchema=auto: {topic} has values of {decoder.kind.simpleString()}, the "
            f"query reads {value_type.simpleString()}"
        )
    arrow_type = to_arrow_type(value_type, timezone="UTC")
    for batch in _read_partition(settings, partition, versions=True):
        yield decoder.apply(batch, arrow_type)


def _read_partition(settings: Settings, partition: Range, *, versions: bool) -> Iterator[Any]:
    service, poll, access = settings.service_url, settings.poll_timeout_ms, settings.access
    if settings.read_path == opts.READ_PATH_CLIENT:
        yield from read_range(
            service, partition, poll_timeout_ms=poll, access=access, versions=versions
        )
        return

    def client_from(after: Position) -> Iterator[Any]:
        """The rest of the range, read by the official client's loop."""
        rest = Range(partition.topic, after, Position.parse(partition.until))
        return read_range(service, rest, poll_timeout_ms=poll, access=access, versions=versions)

    yield from protocol_read.read_range(
        service,
        partition,
        poll_timeout_ms=poll,
        fallback=client_from,
        access=access,
        versions=versions,
    )


def _schema_version(msg: Any) -> int:
    """A message's schema version (-1: none), from the official client's message."""
    as_int = getattr(msg, "int_schema_version", None)
    if as_int is not None:
        return int(as_int())
    raw = msg.schema_version()
    raw = raw.encode("latin-1") if isinstance(raw, str) else raw
    return int.from_bytes(raw, "big") if raw else -1


# --- batch --------------------------------------------------------------------------------------


class BatchReader(DataSourceReader):
    """``spark.read.format("magnetar")``: planned once on the driver, at load()."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.settings = Settings.parse(options, streaming=False)
        admin = self.settings.admin()
        partitions = self.settings.resolve(admin)
        self.settings.check_offsets_name_known_partitions(partitions)
        self.settings = self.settings.with_readers(admin, partitions)
        self.ranges: list[Range] = []
        for partition in partitions:
            state = admin.state(partition)
            after = start_after(_spec(self.settings.starting, partition), state)
            until = end_until(_spec(self.settings.ending, partition), state)
            if until is not None and until > after:
                self.ranges.append(Range(partition, after, until))

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.settings, partition)


# --- streaming ----------------------------------------------------------------------------------


def _offset(pos: Position, state: PartitionState | None) -> str:
    """The checkpointed form of ``pos``: with the next ledger when ``pos`` closed its ledger."""
    if state is not None and pos.ledger >= 0:
        ids = [lg.ledger_id for lg in state.ledgers]
        ledger = state.ledger(pos.ledger)
        if ledger is not None and ledger.ledger_id != ids[-1] and pos.entry == ledger.entries - 1:
            if pos.batch in (-1, MAX_BATCH):
                return f"{pos.text()}:{ids[ids.index(pos.ledger) + 1]}"
    return pos.text()


def _next_ledger(offset: str) -> int | None:
    parts = offset.split(":")
    return int(parts[3]) if len(parts) > 3 else None


def _entries(state: PartitionState, after: Position, until: Position) -> list[tuple[Position, int]]:
    """The entries holding messages in ``(after, until]``, each with its estimated size."""
    out: list[tuple[Position, int]] = []
    for ledger in state.ledgers:
        if ledger.ledger_id < after.ledger or ledger.ledger_id > until.ledger:
            continue
        size = ledger.size // ledger.entries if ledger.entries else 0
        for entry in range(ledger.entries):
            first = Position(ledger.ledger_id, entry, -1)
            last = Position(ledger.ledger_id, entry, MAX_BATCH)
            if last <= after or first == after or first > until:
                continue  # (``first == after``: a message stored alone, already read)
            out.append((last, size))
    return out


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("magnetar")``: micro-batches of message-id ranges."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.settings = Settings.parse(options, streaming=True)
        admin = self.settings.admin()
        partitions = self.settings.resolve(admin)
        self.settings.check_offsets_name_known_partitions(partitions)
        self.settings = self.settings.with_readers(admin, partitions)
        self.target: dict[str, Position] | None = None

    # offsets
    def initialOffset(self) -> dict[str, str]:
        admin = self.settings.admin()
        offsets: dict[str, str] = {}
        for partition in self.settings.resolve(admin):
            state = admin.state(partition)
            offsets[partition] = start_after(_spec(self.settings.starting, partition), state).text()
        if self.settings.subscription:
            for partition, offset in offsets.items():
                admin.ensure_subscription(
                    partition, self.settings.subscription, _next_entry(Position.parse(offset))
                )
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.settings.max_records:
            return ReadMaxRows(self.settings.max_records)
        if self.settings.max_bytes:
            return ReadMaxBytes(self.settings.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        admin = self.settings.admin()
        self.target = {}
        for partition in self.settings.resolve(admin):
            last = admin.state(partition).last
            if last is not None:
                self.target[partition] = last

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        # Spark plans the next batch once the previous one is committed: ``start`` is done
        # (commit() alone would leave the last batch of an AvailableNow run unreported)
        self.commit(start)
        admin = self.settings.admin()
        end = dict(start)
        pending: list[tuple[str, PartitionState, Position, list[tuple[Position, int]]]] = []
        for partition in self.settings.resolve(admin):
            try:
                state = admin.state(partition)
            except TopicNotFound:
                continue  # deleted since it was listed
            offset = start.get(partition, BEFORE_ALL.text())
            after = Position.parse(offset)
            self._check_loss(partition, offset, after, state)
            until = state.last
            if self.target is not None:
                until = self.target.get(partition)
            if until is None or until <= after:
                end.setdefault(partition, offset)
                continue
            pending.append((partition, state, until, _entries(state, after, until)))
        budget: float = math.inf
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            budget = limit.max_bytes
        left = len(pending)
        for partition, state, until, entries in pending:
            share = math.ceil(budget / left) if budget != math.inf else math.inf
            left -= 1
            taken, used = 0, 0
            for _, size in entries:
                cost = 1 if isinstance(limit, ReadMaxRows) else size
                # a byte budget always lets one entry through (progress); a row budget never
                if used + cost > share and (taken or isinstance(limit, ReadMaxRows)):
                    break
                taken, used = taken + 1, used + cost
            if budget != math.inf:
                budget -= used
            if taken == 0:
                end.setdefault(partition, start.get(partition, BEFORE_ALL.text()))
                continue
            pos = until if taken >= len(entries) else entries[taken - 1][0]
            end[partition] = _offset(pos, state)
        return end

    def _check_loss(
        self, partition: str, offset: str, after: Position, state: PartitionState
    ) -> None:
        if not _check_loss_needed(offset, state):
            return
        message = (
            f"data loss on {partition}: the checkpoint stands at message {after.text()} of "
            f"ledger {after.ledger}, which is no longer stored (retention or TTL removed it); "
            f"the earliest stored ledger is {state.first_ledger}"
        )
        if self.settings.fail_on_data_loss:
            raise DataLossError(
                message + ". Set failOnDataLoss=false to continue from the earliest stored message."
            )
        log.warning(
            "%s; continuing from the earliest stored message (failOnDataLoss=false)", message
        )

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        ranges = []
        # sorted: a replayed micro-batch maps each topic partition to the same Spark
        # partition, which the exactly-once sink's producer names rely on
        for partition, offset in sorted(end.items()):
            after = Position.parse(start.get(partition, BEFORE_ALL.text()))
            until = Position.parse(offset)
            if until > after:
                ranges.append(Range(partition, after, until))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.settings, partition)

    def commit(self, end: dict[str, str]) -> None:
        """Advance the durable subscription (when one is named) to what Spark committed."""
        if not self.settings.subscription:
            return
        admin = self.settings.admin()
        for partition, offset in end.items():
            following = _next_ledger(offset)
            pos = Position.parse(offset)
            target = Position(following, 0, -1) if following is not None else _next_entry(pos)
            if target is None:
                continue
            try:
                admin.move_subscription(partition, self.settings.subscription, target)
            except MagnetarSourceError as err:  # lag reporting must not stop the query
                log.warning("subscription %s: %s", self.settings.subscription, err)

    def stop(self) -> None:
        """Nothing held between calls: every call opens what it needs."""


def _check_loss_needed(offset: str, state: PartitionState) -> bool:
    """Retention or TTL removed the ledger the checkpoint stands in (and the one after it,
    when the checkpointed message closed its ledger): messages after it may be gone."""
    after = Position.parse(offset)
    if after.ledger < 0 or state.ledger(after.ledger) is not None:
        return False
    following = _next_ledger(offset)
    if following is not None and state.ledger(following) is not None:
        return False
    stored = [lg.ledger_id for lg in state.ledgers]
    return not (stored and after.ledger > stored[-1])  # a ledger of the past


def _next_entry(after: Position) -> Position | None:
    """The first entry a subscription still has to deliver after ``after`` (None: earliest)."""
    if after.ledger < 0 or after.entry < 0:
        return None
    if after.batch in (-1, MAX_BATCH):
        return Position(after.ledger, after.entry + 1, -1)
    return Position(after.ledger, after.entry, -1)
