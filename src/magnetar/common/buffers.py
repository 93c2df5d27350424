"""The type of a message payload on its way through the broker and the ledger client.

A payload is ``bytes`` or a read-only ``memoryview`` into a larger immutable buffer: the
received frame it arrived in (until the ledger copies it into the stored entry), or the
stored entry it is part of (what the managed ledger caches and dispatches, docs/architecture.md
"Copies on the publish and dispatch paths"). Either is sent with ``writev`` as it is; code
that needs ``bytes`` (a protobuf field, a JSON body) calls ``bytes()`` on it.
"""

from __future__ import annotations

from typing import TypeAlias

Payload: TypeAlias = bytes | memoryview
