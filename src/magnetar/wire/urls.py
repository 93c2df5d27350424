"""Pulsar service and broker URLs, parsed once for every client side in Magnetar.

Why this module exists: the proxy (``proxy_to_broker_url``, the brokers it may forward to),
the Spark source (its ``serviceUrl`` option and the URLs lookups answer with) and a broker
calling another broker (transactions) all turn ``pulsar://host:port`` into an address.
Each used to do it its own way, with its own idea of what is valid; this is the one parser,
with one error that says what was wrong.

Accepted, as the official clients accept them:

* a service URL: ``pulsar://host[:port][,host[:port]...][/]`` or ``pulsar+ssl://...``;
  several hosts are tried in turn; the port defaults to 6650 (6651 with ``pulsar+ssl``);
  IPv6 hosts in brackets (``pulsar://[::1]:6650``);
* a broker URL: one host, as lookups answer and clients name in CONNECT's
  ``proxy_to_broker_url``; ``host:port`` without a scheme only where ``bare=True`` (what the
  C++ client puts in ``proxy_to_broker_url``).

Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Final, NamedTuple

PLAIN_SCHEME: Final = "pulsar"
TLS_SCHEME: Final = "pulsar+ssl"
DEFAULT_PORT: Final = 6650
DEFAULT_TLS_PORT: Final = 6651


class BadUrlError(ValueError):
    """A service or broker URL that cannot be used; the message names it and says why."""


class Address(NamedTuple):
    """Where to open a TCP connection."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class ServiceUrl:
    """A parsed service URL: its hosts in the order given, and whether it asks for TLS."""

    text: str
    tls: bool
    addresses: tuple[Address, ...]

    @property
    def first(self) -> Address:
        return self.addresses[0]


def parse_service_url(text: str) -> ServiceUrl:
    """``pulsar[+ssl]://host[:port][,host[:port]...][/]`` -> ServiceUrl; BadUrlError
    naming the URL and the problem otherwise."""
    url = text.strip()
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise BadUrlError(f"{text!r} is not a service URL: expected pulsar://host:port")
    tls = _tls(scheme, text)
    rest = rest.rstrip("/")
    if "/" in rest or "?" in rest or "#" in rest:
        raise BadUrlError(f"{text!r}: a service URL has no path, query or fragment")
    if not rest:
        raise BadUrlError(f"{text!r} names no host")
    default = DEFAULT_TLS_PORT if tls else DEFAULT_PORT
    hosts = tuple(_host_port(part, default=default, url=text) for part in rest.split(","))
    return ServiceUrl(text=url, tls=tls, addresses=hosts)


@functools.lru_cache(maxsize=256)
def parse_broker_url(text: str, *, bare: bool = False) -> tuple[Address, bool]:
    """One broker's URL (``pulsar://host:port`` or ``pulsar+ssl://host:port``; also
    ``host:port`` when ``bare``) -> (address, whether TLS); BadUrlError otherwise. Answers
    are kept (a cluster has a handful of brokers, and the proxy names one on every request)."""
    url = text.strip()
    if bare and "://" not in url:
        return _host_port(url, default=None, url=text), False
    service = parse_service_url(url)
    if len(service.addresses) != 1:
        raise BadUrlError(f"{text!r}: a broker URL names one host")
    return service.first, service.tls


def broker_address(text: str, *, bare: bool = False) -> Address:
    """A plain (``pulsar://``) broker URL's address; BadUrlError for a TLS one, as TLS is
    chosen by the caller's service URL, not by the broker named."""
    address, tls = parse_broker_url(text, bare=bare)
    if tls:
        raise BadUrlError(f"{text!r} is a TLS URL where pulsar://host:port is expected")
    return address


def _tls(scheme: str, text: str) -> bool:
    if scheme == PLAIN_SCHEME:
        return False
    if scheme == TLS_SCHEME:
        return True
    raise BadUrlError(f"{text!r}: the scheme must be pulsar:// or pulsar+ssl://, not {scheme}://")


def _host_port(part: str, *, default: int | None, url: str) -> Address:
    part = part.strip()
    if part.startswith("["):  # [IPv6]:port
        host, close, after = part[1:].partition("]")
        if not close or (after and not after.startswith(":")):
            raise BadUrlError(f"{url!r}: {part!r} is not [IPv6 address]:port")
        port_text = after[1:] if after else ""
    else:
        host, colon, port_text = part.partition(":")
        if colon and not port_text:
            raise BadUrlError(f"{url!r}: {part!r} has an empty port")
        if ":" in port_text:
            raise BadUrlError(f"{url!r}: put an IPv6 host in brackets, as [{part}]")
    if not host:
        raise BadUrlError(f"{url!r}: {part!r} names no host")
    if not port_text:
        if default is None:
            raise BadUrlError(f"{url!r}: expected host:port")
        return Address(host, default)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadUrlError(f"{url!r}: port {port_text!r} is not a number from 1 to 65535")
    return Address(host, int(port_text))
