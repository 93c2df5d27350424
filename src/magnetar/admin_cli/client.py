"""The HTTP side of ``magnetar admin``: one request per command, through the client layer's
admin client (:mod:`magnetar.client.admin`: credentials, TLS, redirects, Pulsar's error body).

This module only says what a verb asks for (:class:`Request`, built without I/O so tests can
check it) and turns the client's errors into :class:`AdminCliError`, which the command line
prints as ``magnetar admin: <status> <reason>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from magnetar.client import admin
from magnetar.client.admin import NO_BODY

__all__ = ["NO_BODY", "AdminCliError", "Client", "Request"]


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
        """Send ``request``; the decoded JSON answer (text when not JSON, None when empty)."""
        try:
            return self.http.call(request.method, request.path, request.body, form=request.form)
        except admin.AdminError as err:
            raise AdminCliError(f"{err.status} {err.reason}") from None
        except admin.AdminUnreachable as err:
            raise AdminCliError(str(err)) from None
        except admin.AdminConfigError as err:
            raise AdminCliError(str(err), 2) from None
