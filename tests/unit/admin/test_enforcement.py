"""Message TTL expiry (Pulsar's PersistentMessageExpiryMonitor) and partitioned-stats
aggregation, on fakes: which cursors move, and to where."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from magnetar.broker import enforcement
from magnetar.broker.topic_ops import stats as topic_stats
from magnetar.managed_ledger.api import LedgerInfo, Position


@dataclass
class FakeCursor:
    name: str
    mark_delete_position: Position
    pending: int = 1
    durable: bool = True
    moved_to: list[Position] = field(default_factory=list)

    def backlog(self) -> int:
        return self.pending

    async def mark_delete(self, position: Position) -> None:
        self.moved_to.append(position)
        self.mark_delete_position = position


@dataclass
class FakeLedger:
    cursors: dict[str, FakeCursor]
    infos: list[LedgerInfo]

    def ledgers(self) -> list[LedgerInfo]:
        return self.infos


@dataclass
class FakeSubscriptions:
    first_young: Position
    asked: list[int] = field(default_factory=list)

    async def position_for_publish_time(self, publish_time: int) -> Position:
        self.asked.append(publish_time)
        return self.first_young


@dataclass
class FakeTopic:
    managed_ledger: FakeLedger
    subscriptions: FakeSubscriptions
    name: str = "persistent://public/default/t"


def topic(first_young: Position, *cursors: FakeCursor) -> Any:
    infos = [LedgerInfo(3, 5, 500, 0), LedgerInfo(4, 5, 500, 0), LedgerInfo(7, 0, 0, 0)]
    return FakeTopic(
        FakeLedger({c.name: c for c in cursors}, infos), FakeSubscriptions(first_young)
    )


async def test_expiry_acknowledges_what_is_older_than_the_cutoff() -> None:
    behind = FakeCursor("behind", Position(3, 1))
    ahead = FakeCursor("ahead", Position(4, 3))
    reader = FakeCursor("reader", Position(3, 0), durable=False)
    idle = FakeCursor("idle", Position(3, 0), pending=0)
    t = topic(Position(4, 2), behind, ahead, reader, idle)
    assert await enforcement.expire(t, cutoff_ms=1234) == 1
    assert behind.moved_to == [Position(4, 1)]  # the entry before the first young one
    assert ahead.moved_to == []  # already past it
    assert reader.moved_to == [] and idle.moved_to == []
    assert t.subscriptions.asked == [1234]


async def test_expiry_steps_back_across_ledgers() -> None:
    cursor = FakeCursor("c", Position(3, -1))
    t = topic(Position(4, 0), cursor)
    await enforcement.expire(t, cutoff_ms=1)
    assert cursor.moved_to == [Position(3, 4)]  # the last entry of the previous ledger


async def test_nothing_old_nothing_moves() -> None:
    cursor = FakeCursor("c", Position(3, -1))
    t = topic(Position(3, 0), cursor)  # the very first entry is young
    assert await enforcement.expire(t, cutoff_ms=1) == 0
    assert cursor.moved_to == []


async def test_expire_on_chosen_cursors_only() -> None:
    a, b = FakeCursor("a", Position(3, 0)), FakeCursor("b", Position(3, 0))
    t = topic(Position(4, 0), a, b)
    await enforcement.expire(t, cutoff_ms=1, cursors=[b])
    assert a.moved_to == [] and b.moved_to == [Position(3, 4)]


def test_check_interval_follows_the_ttl() -> None:
    assert enforcement.ttl_check_interval(2) == 1.0
    assert enforcement.ttl_check_interval(30) == 15.0
    assert enforcement.ttl_check_interval(86400) == 60.0


def test_partitioned_stats_sum_the_partitions() -> None:
    p0 = {
        "msgInCounter": 4,
        "storageSize": 100,
        "publishers": [{"producerName": "a"}],
        "subscriptions": {"s": {"msgBacklog": 1, "type": "Shared", "consumers": [{"c": 1}]}},
        "deduplicationStatus": "Disabled",
    }
    p1 = {
        "msgInCounter": 6,
        "storageSize": 50,
        "publishers": [],
        "subscriptions": {"s": {"msgBacklog": 2, "type": "Shared", "consumers": []}},
    }
    out = topic_stats.aggregate({"p0": p0, "p1": p1}, 2)
    assert out["msgInCounter"] == 10 and out["storageSize"] == 150
    assert out["metadata"] == {"partitions": 2}
    assert out["publishers"] == [{"producerName": "a"}]
    assert out["subscriptions"]["s"]["msgBacklog"] == 3
    assert out["subscriptions"]["s"]["consumers"] == [{"c": 1}]
    assert out["replication"] == {} and out["deduplicationStatus"] == "Disabled"
