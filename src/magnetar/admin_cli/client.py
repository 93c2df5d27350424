"""The HTTP side of ``magnetar admin``: one request per command, through the client layer's
admin client (:mod:`magnetar.client.admin`: credentials, TLS, redirects, Pulsar's error body).

This module only says what a verb asks for (:class:`Request`, built without I/O so tests can
check it) and turns the client's errors into :class:`AdminCliError`, which the command line
prints as ``magnetar admin: <status> <reason>``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from magnetar.client import admin
from magnetar.client.admin import NO_BODY

__all__ = ["NO_BODY", "AdminCliError", "Client", "Message", "Request"]

HEADER_PREFIX = "X-Pulsar-"
POSITION = "/position/"


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message as the admin API answers it: its id, its metadata (the
    ``X-Pulsar-*`` headers without the prefix) and its payload (a batch whole)."""

    message_id: str
    metadata: dict[str, str]
    payload: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "messageId": self.message_id,
            "metadata": self.metadata,
            "payload": base64.b64encode(self.payload).decode(),
        }


class AdminCliError(Exception):
    """An error to print as ``magnetar admin: <message>``, exiting with ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    """One admin API call: what a verb asks for."""

    method: str
    path: str
    body: Any = field(default=NO_BODY)
    form: tuple[admin.FormField, ...] | None = None
    """A multipart/form-data body instead of JSON (the functions API's uploads)."""
    messages: int = 0
    """The answer is a stored message (its metadata in ``X-Pulsar-*`` headers, its payload
    as the body). More than 1: ``path`` ends in ``/position/1`` and positions 1 to
    ``messages`` are asked in turn, up to the first that is not there (peek-messages)."""


class Client:
    """The command line's calls over one :class:`magnetar.client.admin.AdminClient`."""

    def __init__(self, http: admin.AdminClient) -> None:
        self.http = http

    @classmethod
    def of(cls, url: str, **options: Any) -> Client:
        """``AdminClient.of(url, **options)``; bad settings exit 2 naming the problem."""
        try:
            return cls(admin.AdminClient.of(url, **options))
        except admin.AdminConfigError as err:
            raise AdminCliError(str(err), 2) from None

    def call(self, request: Request) -> Any:
        """Send ``request``; the decoded JSON answer (text when not JSON, None when empty);
        a list of :class:`Message` for a request of messages."""
        if request.messages:
            return self._messages(request)
        try:
            return self.http.call(request.method, request.path, request.body, form=request.form)
        except admin.AdminError as err:
            raise AdminCliError(f"{err.status} {err.reason}") from None
        except admin.AdminUnreachable as err:
            raise AdminCliError(str(err)) from None
        except admin.AdminConfigError as err:
            raise AdminCliError(str(err), 2) from None

    def _message(self, request: Request) -> Message:
        try:
            headers, payload = self.http.call(
                request.method, request.path, request.body, with_headers=True
            )
        except admin.AdminError as err:
            raise AdminCliError(f"{err.status} {err.reason}") from None
        except admin.AdminUnreachable as err:
            raise AdminCliError(str(err)) from None
        except admin.AdminConfigError as err:
            raise AdminCliError(str(err), 2) from None
        metadata = {
            k[len(HEADER_PREFIX) :]: v
            for k, v in headers.items()
            if k.lower().startswith(HEADER_PREFIX.lower())
        }
        mid = metadata.pop("Message-ID", metadata.pop("Message-Id", ""))
        return Message(mid, metadata, bytes(payload))

    def _messages(self, request: Request) -> list[Message]:
        if request.messages == 1:
            return [self._message(request)]
        head, _, _ = request.path.rpartition(POSITION)
        out: list[Message] = []
        for n in range(1, request.messages + 1):
            try:
                out.append(self._message(Request(request.method, f"{head}{POSITION}{n}")))
            except AdminCliError as err:
                if not out or not str(err).startswith("404 "):
                    raise
                break  # fewer messages than asked: those there are
        return out
