"""How an Exclusive subscription turns a consumer's permits into reads of batch entries:
Pulsar's preciseDispatcherFlowControl, off by default (docs/configuration.md, "Dispatch flow
control").

Why this test exists: reading permits / messages-per-entry entries held a consumer of large
batches to a few entries per round trip, and under a producer at its maximum rate the
consumer fell behind by seconds. Pulsar's default reads one entry per permit and lets the
permits go below zero; the precise mode stays available and must still stop at the permits.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from magnetar.wire import commands, pb
from tests.integration.broker.subscriptions.helpers import publish
from tests.support import standalone as standalone_procs
from tests.support.raw_client import FrameLog
from tests.support.standalone import StandaloneProc

BATCH = 50
BATCHES = 10
PERMITS = 100


@pytest.fixture(scope="module")
def precise(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    data = tmp_path_factory.mktemp("precise-standalone") / "data"
    with standalone_procs.running(
        data, extra_args=["--precise-dispatcher-flow-control", "true"]
    ) as proc:
        yield proc


def _backlog(proc: StandaloneProc, topic: str) -> None:
    """``BATCHES`` batch entries of ``BATCH`` messages each on ``topic``."""
    with standalone_procs.client(proc) as client:
        ids = publish(
            client,
            topic,
            [f"m{i}" for i in range(BATCH * BATCHES)],
            batch=True,
            batching_max_messages=BATCH,
        )
    assert len({(m.ledger_id(), m.entry_id()) for m in ids}) == BATCHES


def _permits(proc: StandaloneProc, topic: str) -> int:
    path = quote(topic.removeprefix("persistent://"))
    url = f"http://127.0.0.1:{proc.http_port}/admin/v2/persistent/{path}/stats"
    with urllib.request.urlopen(url, timeout=10) as resp:
        stats = json.load(resp)
    (consumer,) = stats["subscriptions"]["sub"]["consumers"]
    return int(consumer["availablePermits"])


class RawConsumer:
    """An Exclusive consumer that grants permits by hand (raw FLOW commands)."""

    def __init__(self, proc: StandaloneProc, topic: str) -> None:
        self.proc, self.topic = proc, topic
        self.raw = FrameLog(proc.port)
        ok = self.raw.subscribe(topic, "sub", 1, sub_type=pb.CommandSubscribe.Exclusive, name="raw")
        assert ok.type == pb.BaseCommand.SUCCESS

    def flow(self, times: int = 1) -> tuple[int, int]:
        """(batch entries received, the consumer's permits after) ``times`` FLOWs of
        ``PERMITS`` each."""
        got = 0
        for _ in range(times):
            self.raw.command(commands.flow(consumer_id=1, permits=PERMITS))
            self.raw.pump(1.0)
            got += len(self.raw.messages(1))
        return got, _permits(self.proc, self.topic)

    def close(self) -> None:
        self.raw.close()


@pytest.fixture
def consumers() -> Iterator[list[RawConsumer]]:
    made: list[RawConsumer] = []
    yield made
    for c in made:
        c.close()


def test_by_default_a_permit_reads_an_entry_and_every_entry_read_is_sent(
    standalone: StandaloneProc, topic: str, consumers: list[RawConsumer]
) -> None:
    _backlog(standalone, topic)
    consumers.append(c := RawConsumer(standalone, topic))
    # 100 permits read up to 100 entries: the whole backlog, 500 messages
    assert c.flow() == (BATCHES, PERMITS - BATCH * BATCHES)


def test_below_zero_permits_hold_the_dispatch_until_the_flows_catch_up(
    standalone: StandaloneProc, topic: str, consumers: list[RawConsumer]
) -> None:
    _backlog(standalone, topic)
    consumers.append(c := RawConsumer(standalone, topic))
    assert c.flow() == (BATCHES, -400)
    _backlog(standalone, topic)
    # four more FLOWs only bring the permits back to zero: nothing is sent
    assert c.flow(times=4) == (0, 0)
    # the fifth makes them positive, and the new backlog goes out whole
    assert c.flow() == (BATCHES, -400)


def test_the_precise_mode_stops_at_the_permits(
    precise: StandaloneProc, topic: str, consumers: list[RawConsumer]
) -> None:
    _backlog(precise, topic)
    consumers.append(c := RawConsumer(precise, topic))
    # each FLOW of 100 permits gets two entries of 50: the entries read past the permits
    # are read again for the next FLOW
    assert c.flow() == (PERMITS // BATCH, 0)
    assert c.flow() == (PERMITS // BATCH, 0)
