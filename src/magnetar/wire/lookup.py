"""The topic lookup's redirect loop as a state machine: what to ask next, of whom, and when
the owner is found.

Why this module exists: a client looking a topic up asks any broker (the service URL), and
the answer is Connect (this broker serves it), Redirect (ask that broker, maybe
authoritatively) or Failed; behind a proxy either may say ``proxy_through_service_url``
(connect to the service URL again, naming the broker in CONNECT's ``proxy_to_broker_url``).
The Spark source's reader and the proxy (which follows redirects for its clients) each
followed that chain with their own loop; this is the loop's logic once, without I/O: the
caller opens the connection a step names, sends ``request``, and hands the answer to
``answer``. The chain is cut after ``max_redirects`` redirects, as the official clients do.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from magnetar.wire import commands, pb, urls

MAX_REDIRECTS: Final = 20
"""Lookup redirects followed before giving up (the official clients' default)."""

_C = pb.BaseCommand
_LT = pb.CommandLookupTopicResponse


class LookupFailedError(Exception):
    """The lookup cannot succeed from here: a Failed answer or an ERROR (``code`` is the
    broker's ServerError), or the chain was cut."""

    def __init__(self, code: pb.ServerError.ValueType, message: str) -> None:
        super().__init__(f"{commands.error_name(code)}: {message}")
        self.code = code
        self.message = message


class TooManyRedirectsError(LookupFailedError):
    """More redirects than ``max_redirects``: brokers sending a client round in a circle."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Where the next connection goes: a broker's URL, or the service URL (``broker_url``
    None) -- naming a broker in ``proxy_to`` when a proxy must pipe to it."""

    broker_url: str | None
    proxy_to: str | None = None

    @property
    def broker(self) -> str | None:
        """The broker this reaches, directly or through the proxy (None: any broker)."""
        return self.proxy_to or self.broker_url


SERVICE: Final = Target(broker_url=None)
"""The service URL itself (a broker behind it, or a proxy's lookup connection)."""


def address_of(target: Target, service: urls.ServiceUrl) -> tuple[urls.Address, str | None]:
    """Where a client with ``service`` opens the connection ``target`` names: (address,
    the broker a proxy pipes it to). BadUrlError when the broker's URL is unusable."""
    if target.broker_url is None:
        return service.first, target.proxy_to
    address, _ = urls.parse_broker_url(target.broker_url)
    return address, None


@dataclasses.dataclass(frozen=True)
class Ask:
    """Send a LOOKUP to ``target``, authoritative or not."""

    target: Target
    authoritative: bool


@dataclasses.dataclass(frozen=True)
class Found:
    """The topic's owner: connect to ``target`` to produce or consume."""

    target: Target


_FIRST: Final = Ask(SERVICE, authoritative=False)
"""Every lookup's first step (a value: shared by all)."""


class Redirects:
    """One lookup's chain of answers. ``tls``: follow ``brokerServiceUrlTls`` (the client
    connects with TLS)."""

    def __init__(self, *, max_redirects: int = MAX_REDIRECTS, tls: bool = False) -> None:
        self.max_redirects = max_redirects
        self.tls = tls
        self.redirects = 0
        self.step: Ask | Found = _FIRST

    def request(self, *, topic: str, request_id: int) -> pb.BaseCommand:
        """The LOOKUP to send for the current step."""
        step = self.step
        if not isinstance(step, Ask):
            raise RuntimeError("the lookup is over: the owner was found")
        return commands.lookup(topic=topic, request_id=request_id, authoritative=step.authoritative)

    def answer(self, cmd: pb.BaseCommand) -> Ask | Found:
        """The next step after the answer to the current step's LOOKUP (a LOOKUP_RESPONSE,
        or an ERROR); LookupFailedError when there is none."""
        if cmd.type == _C.ERROR:
            raise LookupFailedError(cmd.error.error, cmd.error.message)
        if cmd.type != _C.LOOKUP_RESPONSE:
            raise LookupFailedError(
                pb.UnknownError, f"LOOKUP answered with {commands.type_name(cmd.type)}"
            )
        r = cmd.lookupTopicResponse
        if r.response == _LT.Failed:
            raise LookupFailedError(r.error, r.message)
        url = r.brokerServiceUrlTls if self.tls else r.brokerServiceUrl
        if not url:
            which = "brokerServiceUrlTls" if self.tls else "brokerServiceUrl"
            raise LookupFailedError(pb.ServiceNotReady, f"the lookup answer has no {which}")
        target = Target(None, proxy_to=url) if r.proxy_through_service_url else Target(url)
        if r.response == _LT.Redirect:
            self.redirects += 1
            if self.redirects > self.max_redirects:
                raise TooManyRedirectsError(
                    pb.ServiceNotReady, f"more than {self.max_redirects} lookup redirects"
                )
            self.step = Ask(target, authoritative=r.authoritative)
        else:
            self.step = Found(target)
        return self.step
