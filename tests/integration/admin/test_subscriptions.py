"""Subscriptions through the admin API: list, create at a position, delete, skip, clear
backlog, expire, reset by time and by message id; the backlog follows each step."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pulsar

from tests.integration.admin.conftest import Admin
from tests.support.wait import wait_until

NS = "/persistent/public/default"


def backlog(admin: Admin, topic: str, sub: str) -> int:
    return int(admin.get(f"{NS}/{topic}/stats")[1]["subscriptions"][sub]["msgBacklog"])


def test_subscription_admin(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/subs-t"
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    earliest = {"ledgerId": -1, "entryId": -1}
    assert admin.put(f"{NS}/subs-t/subscription/from-start", earliest) == (204, None)
    assert admin.put(f"{NS}/subs-t/subscription/from-end") == (204, None)
    at_third = {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id()}
    assert admin.put(f"{NS}/subs-t/subscription/from-third", at_third) == (204, None)
    status, body = admin.put(f"{NS}/subs-t/subscription/from-end")
    assert status == 409 and body["reason"]
    assert admin.get(f"{NS}/subs-t/subscriptions") == (
        200,
        ["from-end", "from-start", "from-third"],
    )
    assert backlog(admin, "subs-t", "from-start") == 5
    assert backlog(admin, "subs-t", "from-end") == 0
    assert backlog(admin, "subs-t", "from-third") == 3
    assert admin.post(f"{NS}/subs-t/subscription/from-start/skip/2") == (204, None)
    assert backlog(admin, "subs-t", "from-start") == 3
    mark = admin.get(f"{NS}/subs-t/internalStats")[1]["cursors"]["from-start"]
    assert mark["markDeletePosition"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert admin.post(f"{NS}/subs-t/subscription/from-start/skip_all") == (204, None)
    assert backlog(admin, "subs-t", "from-start") == 0
    assert admin.delete(f"{NS}/subs-t/subscription/from-end") == (204, None)
    assert admin.delete(f"{NS}/subs-t/subscription/from-end")[0] == 404
    assert admin.post(f"{NS}/subs-t/subscription/nope/skip_all")[0] == 404
    assert admin.post(f"{NS}/subs-t/subscription/nope/skip/1")[0] == 404
    status, body = admin.call("PUT", f"{NS}/subs-t/subscription/bad", raw=b'{"ledgerId": "x"}')
    assert status == 400 and "message id" in body["reason"]
    status, body = admin.post(f"{NS}/subs-t/subscription/from-third/skip/many")
    assert status == 400 and "integer" in body["reason"]
    producer.close()


def test_delete_subscription_with_consumers_needs_force(
    admin: Admin, client: pulsar.Client
) -> None:
    consumer = client.subscribe("persistent://public/default/busy-sub", "b")
    status, body = admin.delete(f"{NS}/busy-sub/subscription/b")
    assert status == 412 and body["reason"]
    assert admin.delete(f"{NS}/busy-sub/subscription/b?force=true") == (204, None)
    assert admin.get(f"{NS}/busy-sub/subscriptions") == (200, [])
    consumer.close()


def test_expire_messages(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/expire-t"
    for sub in ("e1", "e2", "e3"):
        client.subscribe(topic, sub).close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(4):
        producer.send(f"old{i}".encode())
    time.sleep(1.2)  # ages the four past the 1 s expiry: elapsed time is the input, not a wait
    producer.send(b"new")
    assert backlog(admin, "expire-t", "e1") == 5
    assert admin.post(f"{NS}/expire-t/subscription/e1/expireMessages/1") == (204, None)
    assert backlog(admin, "expire-t", "e1") == 1  # the four older than a second expired
    assert backlog(admin, "expire-t", "e2") == 5
    assert admin.post(f"{NS}/expire-t/all_subscription/expireMessages/1") == (204, None)
    assert backlog(admin, "expire-t", "e2") == 1 and backlog(admin, "expire-t", "e3") == 1
    assert admin.post(f"{NS}/expire-t/subscription/e1/expireMessages/-1")[0] == 400
    assert admin.post(f"{NS}/expire-t/subscription/nope/expireMessages/1")[0] == 404
    producer.close()


def test_reset_cursor_by_time_and_message_id(admin: Admin, client: pulsar.Client) -> None:
    topic = "persistent://public/default/reset-t"
    consumer = client.subscribe(topic, "r", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"a{i}".encode()) for i in range(3)]
    # publish times strictly before / after the boundary: clock steps, not waits for a state
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    ids += [producer.send(f"b{i}".encode()) for i in range(2)]
    for _ in ids:
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))

    wait_until(lambda: backlog(admin, "reset-t", "r") == 0)
    assert admin.post(f"{NS}/reset-t/subscription/r/resetcursor/{boundary}") == (204, None)
    wait_until(lambda: backlog(admin, "reset-t", "r") == 2)
    mid = {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id()}
    assert admin.post(f"{NS}/reset-t/subscription/r/resetcursor", mid) == (204, None)
    wait_until(lambda: backlog(admin, "reset-t", "r") == 4)
    got = []
    consumer2 = client.subscribe(topic, "r", consumer_type=pulsar.ConsumerType.Shared)
    for _ in range(4):
        msg = consumer2.receive(timeout_millis=15_000)
        got.append(msg.data().decode())
        consumer2.acknowledge(msg)
    assert sorted(got) == ["a1", "a2", "b0", "b1"]
    assert admin.post(f"{NS}/reset-t/subscription/nope/resetcursor/{boundary}")[0] == 404
    status, body = admin.call("POST", f"{NS}/reset-t/subscription/r/resetcursor", raw=b"{}")
    assert status == 400 and "message id" in body["reason"]
    status, body = admin.post(f"{NS}/reset-t/subscription/r/resetcursor/yesterday")
    assert status == 400 and "timestamp" in body["reason"]
    consumer.close()
    consumer2.close()
    producer.close()


def peek(admin: Admin, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET a peek path: (status, headers, body)."""
    try:
        with urllib.request.urlopen(admin.base + path, timeout=30) as r:
            return r.status, dict(r.headers.items()), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers.items()), err.read()


def test_peek_messages_and_last_message_id(admin: Admin, client: pulsar.Client) -> None:
    """Pulsar's ``.../subscription/{sub}/position/{n}`` (the Java admin client's
    peekMessages) and ``.../lastMessageId``: the n-th unacknowledged message with its
    metadata in X-Pulsar-* headers (properties both as Pulsar 4's JSON header and 3's
    per-key headers), a batch whole; 404 past the end."""
    topic = "persistent://public/default/peek-t"
    consumer = client.subscribe(topic, "audit")
    producer = client.create_producer(topic, batching_enabled=False)
    first = producer.send(b"one", properties={"n": "1"}, partition_key="k1")
    producer.send(b"two")
    status, headers, body = peek(admin, f"{NS}/peek-t/subscription/audit/position/1")
    assert status == 200 and body == b"one"
    assert headers["X-Pulsar-Message-ID"] == f"{first.ledger_id()}:{first.entry_id()}"
    assert json.loads(headers["X-Pulsar-PROPERTY"]) == {"n": "1"}
    assert headers["X-Pulsar-PROPERTY-n"] == "1"
    assert headers["X-Pulsar-partition-key"] == "k1"
    assert headers["X-Pulsar-publish-time"].endswith("Z")
    assert headers["X-Pulsar-sequence-id"] == "0"
    assert peek(admin, f"{NS}/peek-t/subscription/audit/position/2")[2] == b"two"
    assert peek(admin, f"{NS}/peek-t/subscription/audit/position/3")[0] == 404
    assert peek(admin, f"{NS}/peek-t/subscription/nope/position/1")[0] == 404
    assert peek(admin, f"{NS}/peek-t/subscription/audit/position/0")[0] == 400
    # an acknowledged message is not peeked; a batch comes whole with its message count
    consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    batcher = client.create_producer(topic, batching_enabled=True, batching_max_messages=3)
    for i in range(3):
        batcher.send_async(f"b{i}".encode(), None)
    batcher.flush()
    wait_until(lambda: peek(admin, f"{NS}/peek-t/subscription/audit/position/1")[2] == b"two")
    status, headers, body = peek(admin, f"{NS}/peek-t/subscription/audit/position/2")
    assert status == 200 and headers["X-Pulsar-num-batch-message"] == "3"
    assert headers["X-Pulsar-batch-size"] == str(len(body))
    status, last = admin.get(f"{NS}/peek-t/lastMessageId")
    assert status == 200
    assert (last["ledgerId"], last["entryId"]) == (first.ledger_id(), first.entry_id() + 2)
    assert (last["partitionIndex"], last["batchIndex"]) == (-1, 2)
    status, empty = admin.get(f"{NS}/peek-empty/lastMessageId")
    assert status == 404 or empty["entryId"] == -1
