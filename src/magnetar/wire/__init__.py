"""The Pulsar binary protocol as pure data: bytes in, typed commands out, and back.

Nothing here does I/O. The connection layer feeds received bytes to ``frames.FrameDecoder``
and writes what ``frames.encode_*`` return; the service layer works with the generated
protobuf messages (``pb``), ``ids.MessageId`` and ``topics.TopicName``. Keeping the codec
apart makes it fuzzable and testable without sockets, and keeps the hot path in one place.

Modules: ``frames`` (framing, checksums), ``commands`` (building and dispatching commands),
``batch`` (batched payloads, batch-index ack sets), ``ids`` (message ids), ``topics`` (topic
names), ``errors`` (what the codec raises). ``pb`` is the module generated from
proto/wire/PulsarApi.proto by ``make proto``.
"""

from magnetar.wire._gen import PulsarApi_pb2 as pb

__all__ = ["pb"]
