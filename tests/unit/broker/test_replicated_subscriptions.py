"""Replicated subscriptions between two clusters' copies of a topic, in one process: two
in-memory managed ledgers, the real subscriptions and controllers, and a relay that copies
what each replicator would send (``Replicator._prepare``) and hands the markers to the other
side as its producer path does (docs/geo-replication.md, "Replicated subscriptions")."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from magnetar.broker import replication
from magnetar.broker.replicated_subscriptions import ReplicatedSubscriptionsController, Settings
from magnetar.broker.subscriptions.entries import split_entry
from magnetar.broker.subscriptions.topic_subscriptions import TopicSubscriptionsImpl
from magnetar.managed_ledger.api import EARLIEST, ManagedLedger, Position
from magnetar.managed_ledger.memory import MemoryManagedLedgerFactory
from magnetar.wire import frames, markers, pb
from magnetar.wire.topics import TopicName
from tests.unit.broker.subscriptions.fakes import FakeCnx, ack_cmd, settle, subscribe_cmd

TOPIC = "persistent://geo/ns/t"


@dataclass
class Side:
    cluster: str
    ml: ManagedLedger
    subs: TopicSubscriptionsImpl
    controller: ReplicatedSubscriptionsController
    published: list[int]
    """Messages published (the topic's counter the controller reads)."""
    sent: Position = field(default_factory=lambda: Position(-1, -1))
    """The last entry relayed to the other side."""


async def _side(cluster: str, other: str, settings: Settings) -> Side:
    ml = await MemoryManagedLedgerFactory().open(f"geo/ns/persistent/t-{cluster}")
    subs = TopicSubscriptionsImpl(TopicName.parse(TOPIC), ml)
    published = [0]
    controller = ReplicatedSubscriptionsController(
        topic=TOPIC,
        managed_ledger=ml,
        local=cluster,
        settings=settings,
        remotes=lambda: [other],
        subscriptions=subs,
        published=lambda: published[0],
        entries_added=lambda: None,
    )
    subs.snapshots = controller
    return Side(cluster, ml, subs, controller, published)


async def _publish(side: Side, *bodies: bytes) -> list[Position]:
    out = []
    for body in bodies:
        meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        out.append(await side.ml.add_entry(frames.encode_headers_and_payload(meta, body)))
        side.published[0] += 1
    return out


async def _settle(*sides: Side) -> None:
    for _ in range(5):
        for side in sides:
            chores = list(side.controller._chores)
            if chores:
                await asyncio.gather(*chores, return_exceptions=True)
        await asyncio.sleep(0)


async def _relay(source: Side, target: Side) -> list[tuple[Position, bytes]]:
    """Copy what ``source``'s replicator to ``target`` would send; (target position, body)."""
    replicator = replication.Replicator(
        topic=TOPIC,
        managed_ledger=source.ml,
        local=source.cluster,
        remote=target.cluster,
        clusters=cast(Any, None),
    )
    lce = source.ml.last_confirmed_entry
    start = source.ml.next_position(source.sent) if source.sent.entry_id >= 0 else EARLIEST
    entries = [] if lce.entry_id < 0 else await source.ml.read_entries(start, max_entries=1000)
    copied = []
    for entry in entries:
        source.sent = entry.position
        prepared = replicator._prepare(entry)
        if prepared is None:
            continue
        meta, payload, _ = prepared
        position = await target.ml.add_entry(frames.encode_headers_and_payload(meta, payload))
        target.published[0] += 1
        if meta.marker_type:
            target.controller.received(position, meta.marker_type, payload)
        copied.append((position, payload))
    await _settle(source, target)
    return copied


def _marker_type(ml_entry_data: bytes) -> int:
    return frames.parse_message_metadata(split_entry(ml_entry_data)[0]).marker_type


async def test_an_acknowledged_position_maps_to_the_other_cluster() -> None:
    a = await _side("a", "b", Settings())
    b = await _side("b", "a", Settings())
    await a.subs.create("rs", start="earliest")
    rs_a = a.subs.subscription("rs")
    assert rs_a is not None
    await rs_a.set_replicated(True)
    assert a.subs.replicated() == [("rs", rs_a.cursor.mark_delete_position)]
    await _publish(a, b"m0", b"m1", b"m2")
    assert [body for _, body in await _relay(a, b)] == [b"m0", b"m1", b"m2"]

    await a.controller.round()  # a snapshot request...
    ((request_on_b, _),) = await _relay(a, b)  # ...lands on b, which answers
    assert b.controller._chores == set()
    response = await _relay(b, a)  # the answer comes back to a only
    assert len(response) == 1
    (snapshot,) = a.controller.snapshots
    assert snapshot.local == response[0][0]
    assert snapshot.remote == {"b": (request_on_b.ledger_id, request_on_b.entry_id)}
    # the completed snapshot is kept on a, never sent to b
    assert _marker_type((await a.ml.read_entry(a.ml.last_confirmed_entry)).data) == markers.SNAPSHOT
    assert await _relay(a, b) == []

    await a.controller.round()  # a's subscription has not reached it: no update
    assert a.controller.updates_sent == 0
    await rs_a.cursor.mark_delete(snapshot.local)
    await a.controller.round()
    assert a.controller.updates_sent == 1
    await _relay(a, b)
    rs_b = b.subs.subscription("rs")  # created on b by the update, replicated, at the position
    assert rs_b is not None and rs_b.replicated
    assert rs_b.cursor.mark_delete_position == request_on_b
    assert b.controller.updates_applied == 1
    await a.controller.round()  # sent once per snapshot
    assert a.controller.updates_sent == 1
    await a.controller.close()
    await b.controller.close()


async def test_no_snapshot_without_new_messages_or_replication() -> None:
    a = await _side("a", "b", Settings())
    b = await _side("b", "a", Settings())
    await _publish(a, b"m0")
    await a.controller.round()
    await _relay(a, b)
    await _relay(b, a)
    assert len(a.controller.snapshots) == 1
    before = a.ml.last_confirmed_entry
    await a.controller.round()  # the markers that came in are not new messages
    assert a.ml.last_confirmed_entry == before
    lonely = await _side("c", "d", Settings())
    lonely.controller.remotes = lambda: []
    await _publish(lonely, b"x")
    await lonely.controller.round()
    assert lonely.ml.last_confirmed_entry.entry_id == 0  # nothing written


async def test_an_unanswered_snapshot_is_abandoned_after_its_timeout() -> None:
    a = await _side("a", "b", Settings(snapshot_timeout_s=0.0))
    await _publish(a, b"m0")
    await a.controller.round()
    first = a.controller._building
    assert first is not None
    await asyncio.sleep(0.01)
    await a.controller.round()  # b never answered: abandoned, the next one started, even
    # without new messages (what the first was to map still is)
    assert a.controller.snapshots_timed_out == 1
    assert a.controller._building is not None
    assert a.controller._building.snapshot_id != first.snapshot_id


async def test_an_update_leaves_a_subscription_that_is_not_replicated_alone() -> None:
    b = await _side("b", "a", Settings())
    await b.subs.create("plain", start="earliest")
    (position,) = await _publish(b, b"m0")
    update = markers.update("plain", {"b": (position.ledger_id, position.entry_id)})
    b.controller.received(position, markers.UPDATE, _payload(update))
    await _settle(b)
    plain = b.subs.subscription("plain")
    assert plain is not None and not plain.replicated
    assert plain.cursor.mark_delete_position < position


def _payload(entry: bytes) -> bytes:
    return bytes(split_entry(entry)[1])


@dataclass
class _Sink:
    """Records what dispatch hands the topic's controller."""

    payloads: list[bytes] = field(default_factory=list)
    started: int = 0

    def snapshot_read(self, payload: bytes) -> None:
        self.payloads.append(payload)

    def ensure_running(self) -> None:
        self.started += 1


async def test_dispatch_never_delivers_markers_and_hands_snapshots_on() -> None:
    ml = await MemoryManagedLedgerFactory().open("public/default/persistent/t")
    subs = TopicSubscriptionsImpl(TopicName.parse("persistent://public/default/t"), ml)
    sink = _Sink()
    subs.snapshots = sink
    side = Side("a", ml, subs, cast(Any, None), [0])
    await _publish(side, b"m0")
    await ml.add_entry(markers.snapshot_request("id1", "b"))
    snapshot = markers.snapshot("id1", local_cluster="a", local=(0, 1), ids={"b": (7, 8)})
    await ml.add_entry(snapshot)
    (last,) = await _publish(side, b"m1")
    cmd = subscribe_cmd(1, sub="rs")
    cmd.replicate_subscription_state = True
    cnx = FakeCnx()
    consumer = await subs.subscribe(cmd, cnx)
    assert sink.started == 1 and [name for name, _ in subs.replicated()] == ["rs"]
    consumer.flow(10)
    await settle()
    assert [m.data for m in cnx.messages] == [
        (await ml.read_entry(p)).data for p in (Position(last.ledger_id, 0), last)
    ]
    assert sink.payloads == [_payload(snapshot)]
    await consumer.ack(ack_cmd(1, 0, last.entry_id))
    rs = subs.subscription("rs")
    assert rs is not None and rs.cursor.mark_delete_position == last  # over the markers too
    assert rs.stats()["isReplicated"] is True
    # a reader asking for the last message id never gets a marker's
    await ml.add_entry(markers.update("rs", {"b": (7, 8)}))
    assert (await subs.last_message_id()).entry_id == last.entry_id
