"""Request ids matched with answers, without sockets."""

from __future__ import annotations

import pytest

from magnetar.wire import commands, matching, pb
from magnetar.wire.ids import MessageId


def test_answers_find_their_waiter_and_other_frames_none() -> None:
    pending: matching.Pending[str] = matching.Pending()
    a, b = pending.next_id(), pending.next_id()
    assert (a, b) == (1, 2)
    pending.expect(a, "lookup")
    pending.expect(b, "subscribe")
    assert pending.answer(commands.success(b)) == "subscribe"
    assert pending.answer(commands.success(b)) is None  # answered once
    assert pending.answer(commands.pong()) is None
    message = commands.message(consumer_id=1, message_id=MessageId(1, 2))
    assert pending.answer(message) is None
    assert pending.answer(commands.lookup_response(request_id=a, broker_service_url="x")) == (
        "lookup"
    )
    assert len(pending) == 0


def test_an_id_waits_once_and_drain_hands_back_the_rest() -> None:
    pending: matching.Pending[int] = matching.Pending(first=7)
    rid = pending.next_id()
    pending.expect(rid, 1)
    with pytest.raises(ValueError, match="already waiting"):
        pending.expect(rid, 2)
    pending.expect(pending.next_id(), 3)
    pending.forget(rid)
    assert pending.drain() == [3]
    assert pending.answer(commands.success(rid)) is None


def test_request_id_of_and_set_request_id() -> None:
    cmd = commands.lookup(topic="t", request_id=5)
    assert matching.request_id_of(cmd) == 5
    matching.set_request_id(cmd, 9)
    assert cmd.lookupTopic.request_id == 9
    assert matching.request_id_of(commands.ping()) is None
    assert matching.request_id_of(pb.BaseCommand(type=pb.BaseCommand.SUCCESS)) is None
