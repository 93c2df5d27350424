"""``functions trigger``: send one value to a function's input and wait for its output.

As Pulsar's ``triggerFunction``: a reader (a non-durable subscription) is opened on the output
topic at its end, the value is sent to the input topic, and the first output message whose
``__pfn_input_msg_id__`` property names the sent message is the answer. Through the client
layer (``magnetar.client``: a pool, a producer and a consumer handle) to the broker's own
service URL; bounded by a timeout (None then, as no output arrived).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import time
import uuid
from ssl import SSLContext
from typing import Final

from magnetar import __version__
from magnetar.client import connection, handles, pool
from magnetar.wire import pb, session
from magnetar.wire.ids import MessageId

DEFAULT_TIMEOUT_S: Final = 10.0
PFN_INPUT_MSG_ID: Final = "__pfn_input_msg_id__"
_OPTIONS: Final = connection.Options(
    client_version=f"magnetar-functions-trigger-{__version__}",
    connect_timeout_s=DEFAULT_TIMEOUT_S,
    request_timeout_s=DEFAULT_TIMEOUT_S,
)


def source_id(encoded: str) -> MessageId | None:
    """The input message id an output's ``__pfn_input_msg_id__`` names (None if garbled)."""
    try:
        data = pb.MessageIdData.FromString(base64.b64decode(encoded))
    except Exception:  # binascii.Error, protobuf's DecodeError
        return None
    return MessageId.from_proto(data)


async def trigger(
    service_url: str,
    *,
    input_topic: str,
    output_topic: str | None,
    payload: bytes,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ssl: SSLContext | None = None,
    auth: session.AuthProvider | None = None,
) -> bytes | None:
    """Send ``payload`` to ``input_topic``; the function's output for it (None when the
    function has no output topic or none came within ``timeout_s``). ``ssl`` and ``auth``:
    the TLS context of a ``pulsar+ssl://`` URL and the credentials (a secured broker's own
    client settings)."""
    options = dataclasses.replace(_OPTIONS, ssl=ssl, auth=auth)
    clients = pool.ConnectionPool(options=options, service_url=service_url)
    reader: handles.Consumer | None = None
    producer: handles.Producer | None = None
    try:
        if output_topic:
            reader = await handles.Consumer.subscribe(
                clients,
                output_topic,
                f"__trigger-{uuid.uuid4().hex}",
                initial_position=pb.CommandSubscribe.Latest,
                durable=False,
            )
        producer = await handles.Producer.create(clients, input_topic)
        sent = await asyncio.wait_for(producer.send(payload), timeout_s)
        if reader is None:
            return None
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await asyncio.wait_for(reader.receive(), left)
            except TimeoutError:
                return None
            reader.acknowledge(message.message_id)
            source = source_id(message.properties.get(PFN_INPUT_MSG_ID, ""))
            if source is not None and (source.ledger_id, source.entry_id) == (
                sent.ledger_id,
                sent.entry_id,
            ):
                return message.payload
        return None
    finally:
        for handle in (producer, reader):
            if handle is not None:
                with contextlib.suppress(Exception):
                    await handle.close()
        clients.close()
