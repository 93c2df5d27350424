"""Routes: a topic's last message id, peeking at a subscription's n-th message, examining
the n-th stored message (``examinemessage``) and reading one by its id
(``ledger/{ledgerId}/entry/{entryId}``), each message with its metadata in Pulsar's
``X-Pulsar-*`` response headers."""

from __future__ import annotations

import base64
import datetime
import json

from aiohttp import web

from magnetar.broker.admin import validation
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic_ops import messages
from magnetar.managed_ledger.api import Position
from magnetar.wire import pb


async def last_message_id(request: web.Request) -> web.Response:
    """The last stored message's id (entry -1 when the topic is empty; the last batch index
    when the last entry is a batch), as Pulsar's ``lastMessageId``."""
    last = await messages.last_message_id(paths.scope(request), await paths.topic(request))
    body = {
        "ledgerId": last.ledger_id,
        "entryId": last.entry_id,
        "partitionIndex": last.partition_index,
        "batchIndex": last.batch_index,
        "batchSize": last.batch_size,
    }
    return web.json_response(body)


def _iso_ms(ms: int) -> str:
    """Pulsar's DateFormatter (ISO-8601 with offset, UTC as Z)."""
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _peek_headers(position: Position, md: pb.MessageMetadata, payload_size: int) -> dict[str, str]:
    """Pulsar's ``X-Pulsar-*`` response headers describing a peeked entry."""
    h = {"X-Pulsar-Message-ID": f"{position.ledger_id}:{position.entry_id}"}
    if md.properties:
        # Pulsar 4.x sends (and its admin client reads) one JSON header; 3.x one header per
        # property: both, so either client finds the properties
        props = {kv.key: kv.value for kv in md.properties}
        h["X-Pulsar-PROPERTY"] = json.dumps(props, separators=(",", ":"))
        for key, value in props.items():
            h[f"X-Pulsar-PROPERTY-{key}"] = value
    h["X-Pulsar-publish-time"] = _iso_ms(md.publish_time)
    if md.HasField("event_time") and md.event_time:
        h["X-Pulsar-event-time"] = _iso_ms(md.event_time)
    if md.HasField("deliver_at_time"):
        h["X-Pulsar-deliver-at-time"] = _iso_ms(md.deliver_at_time)
    if md.HasField("num_messages_in_batch"):
        h["X-Pulsar-num-batch-message"] = str(md.num_messages_in_batch)
        h["X-Pulsar-batch-size"] = str(payload_size)
    if md.HasField("null_value") and md.null_value:
        h["X-Pulsar-null-value"] = "true"
    if md.HasField("num_chunks_from_msg"):
        h["X-Pulsar-num-chunks-from-msg"] = str(md.num_chunks_from_msg)
        h["X-Pulsar-total-chunk-msg-size"] = str(md.total_chunk_msg_size)
        h["X-Pulsar-chunk-id"] = str(md.chunk_id)
        h["X-Pulsar-uuid"] = md.uuid
    if md.HasField("partition_key"):
        h["X-Pulsar-partition-key"] = md.partition_key
    if md.HasField("ordering_key"):
        h["X-Pulsar-Base64-ordering-key"] = base64.b64encode(md.ordering_key).decode()
    if md.HasField("schema_version"):
        h["X-Pulsar-Base64-schema-version-b64encoded"] = base64.b64encode(
            md.schema_version
        ).decode()
    h["X-Pulsar-Is-Encrypted"] = "true" if md.encryption_keys else "false"
    if md.HasField("compression"):
        h["X-Pulsar-compression"] = pb.CompressionType.Name(md.compression)
    if md.HasField("uncompressed_size"):
        h["X-Pulsar-uncompressed-size"] = str(md.uncompressed_size)
    h["X-Pulsar-producer-name"] = md.producer_name
    h["X-Pulsar-sequence-id"] = str(md.sequence_id)
    if md.HasField("replicated_from"):
        h["X-Pulsar-replicated-from"] = md.replicated_from
    return h


async def peek(request: web.Request) -> web.Response:
    """The n-th (from 1) message the subscription has not acknowledged, as Pulsar answers
    ``.../position/{n}``: the (uncompressed) payload, the metadata in ``X-Pulsar-*``
    headers; a batch whole (the client splits it); 404 past the last message."""
    n = validation.path_integer(request.match_info["n"], "message position", minimum=1)
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    return _message(await messages.peek(paths.scope(request), topic, name, n))


def _message(found: messages.PeekedMessage) -> web.Response:
    return web.Response(
        body=found.payload,
        headers=_peek_headers(found.position, found.metadata, len(found.payload)),
        content_type="application/octet-stream",
    )


async def examine(request: web.Request) -> web.Response:
    """The ``messagePosition``-th (from 1, default 1) stored message from the
    ``initialPosition`` end (``latest``, the default, or ``earliest``)."""
    n = validation.path_integer(
        request.query.get("messagePosition", "1"), "messagePosition", minimum=1
    )
    initial = request.query.get("initialPosition", "latest")
    topic = await paths.topic(request)
    return _message(await messages.examine(paths.scope(request), topic, initial=initial, n=n))


async def by_id(request: web.Request) -> web.Response:
    """The stored message (a batch whole) at ``ledgerId:entryId``."""
    ledger_id = validation.path_integer(request.match_info["ledger"], "ledgerId", minimum=0)
    entry_id = validation.path_integer(request.match_info["entry"], "entryId", minimum=0)
    topic = await paths.topic(request)
    found = await messages.by_id(
        paths.scope(request), topic, ledger_id=ledger_id, entry_id=entry_id
    )
    return _message(found)


def register(router: web.UrlDispatcher) -> None:
    router.add_get(f"{paths.TOPIC}/lastMessageId", last_message_id)
    router.add_get(paths.SUBSCRIPTION + "/position/{n}", peek)
    router.add_get(f"{paths.TOPIC}/examinemessage", examine)
    router.add_get(paths.TOPIC + "/ledger/{ledger}/entry/{entry}", by_id)
