"""Matching a client's requests with the broker's answers by request id.

Why this module exists: every request a Pulsar client sends (LOOKUP, SUBSCRIBE, PRODUCER,
CLOSE_CONSUMER, END_TXN_ON_PARTITION...) carries a ``request_id`` that the answer (SUCCESS,
ERROR, LOOKUP_RESPONSE, PRODUCER_SUCCESS...) carries back, while other frames (MESSAGE, PING,
SEND_RECEIPT) arrive in between. The client connections (``magnetar.client``) keep what
waits for an answer here, whatever a waiter is (an asyncio future, a marker of a blocking
call): pure bookkeeping, no I/O, tested without sockets.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Final, Generic, TypeVar

from magnetar.wire import commands, pb

W = TypeVar("W")


def _has_request_id(field: str) -> bool:
    message = pb.BaseCommand.DESCRIPTOR.fields_by_name[field].message_type
    return message is not None and "request_id" in message.fields_by_name


_REQUEST_BODY: Final[Mapping[int, str]] = {
    value: name for value, name in commands.FIELD_BY_TYPE.items() if _has_request_id(name)
}
"""The sub-command field of each command type whose sub-command has a ``request_id`` (read
from the proto descriptor): one dict lookup per frame tells whether an answer can match."""

_HAS_FIELD: Final[Any] = pb.BaseCommand.HasField


def request_id_of(cmd: pb.BaseCommand) -> int | None:
    """The request id a command carries (None: it has no body or no request id, as MESSAGE,
    PING or SEND_RECEIPT)."""
    name = _REQUEST_BODY.get(cmd.type)
    if name is None or not _HAS_FIELD(cmd, name):
        return None
    body = getattr(cmd, name)
    return int(body.request_id) if body.HasField("request_id") else None


def set_request_id(cmd: pb.BaseCommand, request_id: int) -> None:
    """Give a request ``request_id`` (a proxy forwarding a client's request under its own id,
    and putting the client's back on the answer)."""
    setattr(commands.body(cmd), "request_id", request_id)  # noqa: B010


class Pending(Generic[W]):
    """Request ids handed out on one connection and what waits for each answer."""

    def __init__(self, *, first: int = 1) -> None:
        self._ids = itertools.count(first)
        self._waiting: dict[int, W] = {}

    def next_id(self) -> int:
        return next(self._ids)

    def expect(self, request_id: int, waiter: W) -> None:
        """``waiter`` waits for the answer carrying ``request_id``."""
        if request_id in self._waiting:
            raise ValueError(f"request id {request_id} is already waiting for its answer")
        self._waiting[request_id] = waiter

    def answer(self, cmd: pb.BaseCommand) -> W | None:
        """The waiter ``cmd`` answers (forgotten here), or None: not an answer to a request
        of this connection."""
        rid = request_id_of(cmd)
        if rid is None:
            return None
        return self._waiting.pop(rid, None)

    def forget(self, request_id: int) -> None:
        """Stop waiting for ``request_id`` (its caller gave up: timed out, cancelled)."""
        self._waiting.pop(request_id, None)

    def drain(self) -> list[W]:
        """Every waiter still waiting, forgotten here (the connection is gone)."""
        out = list(self._waiting.values())
        self._waiting.clear()
        return out

    def __len__(self) -> int:
        return len(self._waiting)
