"""Which brokers the proxy may talk to, and its own protocol connections to them.

Why a module: the proxy forwards a client's connection only to a broker it knows (never to
an address a client makes up), and its lookups need a connection per broker that is reused
across clients. Brokers come either from the metadata store (the registrations brokers keep
under their sessions, ``docs/metadata.md``) or from one fixed address (a Kubernetes Service
in front of the brokers), plus every broker URL a lookup answer named.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
import urllib.parse
from typing import Any

from magnetar import __version__
from magnetar.metadata import api, keys
from magnetar.wire import commands, frames, pb
from magnetar.wire.errors import WireError

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 21
CLIENT_VERSION = f"Magnetar-proxy-{__version__}"
_REFRESH_S = 2.0
"""Registrations read from the store are reused this long (a miss re-reads at once)."""


class BrokerUnavailableError(Exception):
    """No broker answered, or none is registered."""


def host_port(url: str) -> tuple[str, int]:
    """``pulsar://host:port`` or ``host:port`` (what clients put in CONNECT's
    ``proxy_to_broker_url``) -> (host, port); ValueError naming the URL otherwise."""
    try:
        parsed = urllib.parse.urlsplit(url if "://" in url else f"pulsar://{url}")
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "pulsar" or not parsed.hostname or port is None:
        raise ValueError(f"not a pulsar://host:port address: {url!r}")
    return parsed.hostname, port


def _address(url: str) -> tuple[str, int] | None:
    try:
        return host_port(url)
    except ValueError:
        return None


class Brokers:
    """The brokers' service (pulsar://) and admin (http://) URLs, in round-robin order."""

    def __init__(
        self,
        *,
        store: api.MetadataStore | None = None,
        service_url: str | None = None,
        web_service_url: str | None = None,
    ) -> None:
        if store is None and not (service_url and web_service_url):
            raise ValueError("brokers come from a metadata store or a fixed address")
        self._store = store
        self._fixed = (service_url, web_service_url) if store is None else None
        self._learned: set[str] = set()
        self._cached: dict[str, str] = {}
        self._read_at = 0.0
        self._turn = itertools.count()

    async def _registered(self, *, fresh: bool = False) -> dict[str, str]:
        """service URL -> admin URL of every live broker."""
        if self._fixed is not None:
            service, web = self._fixed
            assert service is not None and web is not None
            return {service: web}
        if not fresh and time.monotonic() - self._read_at < _REFRESH_S:
            return self._cached
        assert self._store is not None
        found: dict[str, str] = {}
        async for record in self._store.scan_all(keys.BROKERS):
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                data: dict[str, Any] = json.loads(record.value)
                service = str(data.get("pulsarServiceUrl") or "")
                if service:
                    found[service] = str(data.get("webServiceUrl") or "")
        self._cached, self._read_at = found, time.monotonic()
        return found

    async def pick(self) -> tuple[str, str]:
        """(service URL, admin URL) of the next broker in turn."""
        registered = await self._registered()
        if not registered:
            registered = await self._registered(fresh=True)
        if not registered:
            raise BrokerUnavailableError("no broker is registered")
        items = sorted(registered.items())
        return items[next(self._turn) % len(items)]

    async def count(self) -> int:
        """How many brokers are known now."""
        return len(await self._registered())

    def learn(self, service_url: str) -> None:
        """A broker URL a lookup answer named (fixed-address mode trusts those)."""
        self._learned.add(service_url)

    async def is_broker(self, service_url: str) -> bool:
        """Whether a client may be forwarded to ``service_url`` (compared as host:port)."""
        target = _address(service_url)
        if target is None:
            return False
        if self._fixed is not None:
            known = {url for url in (self._fixed[0], *self._learned) if url}
            return target in {_address(url) for url in known}
        for fresh in (False, True):
            registered = await self._registered(fresh=fresh)
            if target in {_address(url) for url in registered}:
                return True
        return False

    async def web_url_of(self, service_url: str) -> str | None:
        return (await self._registered()).get(service_url)


class BrokerLink:
    """One protocol connection from the proxy to a broker, for lookups and other requests
    that carry a request id; answers the broker's PINGs."""

    def __init__(self, url: str, *, max_frame_size: int, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self._max_frame_size = max_frame_size
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._ids = itertools.count(1)
        self._reading: asyncio.Task[None] | None = None
        self.closed = False

    async def open(self) -> None:
        host, port = host_port(self.url)
        async with asyncio.timeout(self.timeout):
            self._reader, self._writer = await asyncio.open_connection(host, port)
            self._writer.write(
                frames.encode_command(
                    commands.connect(
                        client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION
                    )
                )
            )
            decoder = frames.FrameDecoder(max_frame_size=self._max_frame_size)
            while True:
                data = await self._reader.read(65536)
                if not data:
                    raise BrokerUnavailableError(f"{self.url} closed the connection")
                frame = next(iter(decoder.feed(data)), None)
                if frame is None:
                    continue
                if frame.command.type == pb.BaseCommand.CONNECTED:
                    break
                raise BrokerUnavailableError(
                    f"{self.url} answered CONNECT with {commands.type_name(frame.command.type)}"
                )
        self._reading = asyncio.create_task(self._read(decoder), name=f"proxy-link {self.url}")

    async def _read(self, decoder: frames.FrameDecoder) -> None:
        assert self._reader is not None and self._writer is not None
        try:
            while data := await self._reader.read(65536):
                for frame in decoder.feed(data):
                    cmd = frame.command
                    if cmd.type == pb.BaseCommand.PING:
                        self._writer.write(frames.encode_command(commands.pong()))
                        continue
                    if not commands.has_body(cmd):
                        continue
                    rid = getattr(commands.body(cmd), "request_id", None)
                    waiter = self._pending.pop(rid, None) if rid is not None else None
                    if waiter is not None and not waiter.done():
                        waiter.set_result(cmd)
        except (OSError, WireError) as exc:
            log.info("connection to broker %s failed: %s", self.url, exc)
        finally:
            self.close()

    async def request(self, cmd: pb.BaseCommand) -> pb.BaseCommand:
        """Send ``cmd`` (its request id is replaced by one of this link's) and return the
        broker's answer, whose request id is this link's: the caller puts its own back."""
        if self.closed or self._writer is None:
            raise BrokerUnavailableError(f"connection to {self.url} is closed")
        rid = next(self._ids)
        commands.body(cmd).request_id = rid  # type: ignore[attr-defined]
        waiter: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._pending[rid] = waiter
        try:
            self._writer.write(frames.encode_command(cmd))
            async with asyncio.timeout(self.timeout):
                return await waiter
        except TimeoutError:
            raise BrokerUnavailableError(
                f"{self.url} did not answer within {self.timeout}s"
            ) from None
        finally:
            self._pending.pop(rid, None)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_exception(BrokerUnavailableError(f"connection to {self.url} lost"))
        self._pending.clear()
        if self._writer is not None:
            self._writer.close()
        if self._reading is not None and self._reading is not asyncio.current_task():
            self._reading.cancel()


class BrokerLinks:
    """The proxy's links, one per broker URL, opened on first use and replaced when lost."""

    def __init__(self, *, max_frame_size: int, timeout: float) -> None:
        self._links: dict[str, BrokerLink] = {}
        self._opening: dict[str, asyncio.Future[BrokerLink]] = {}
        self._max_frame_size = max_frame_size
        self.timeout = timeout

    async def get(self, url: str) -> BrokerLink:
        link = self._links.get(url)
        if link is not None and not link.closed:
            return link
        opening = self._opening.get(url)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[BrokerLink] = asyncio.get_running_loop().create_future()
        self._opening[url] = future
        try:
            link = BrokerLink(url, max_frame_size=self._max_frame_size, timeout=self.timeout)
            try:
                await link.open()
            except (OSError, TimeoutError, WireError, ValueError) as exc:
                link.close()
                raise BrokerUnavailableError(f"cannot connect to broker {url}: {exc}") from None
            except BaseException:
                link.close()
                raise
            self._links[url] = link
            future.set_result(link)
            return link
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            del self._opening[url]

    async def request(self, url: str, cmd: pb.BaseCommand) -> pb.BaseCommand:
        link = await self.get(url)
        return await link.request(cmd)

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
