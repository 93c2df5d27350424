"""The etcd backend of the metadata store, speaking etcd's v3 gRPC API directly.

Why this module exists: clusters keep their metadata in etcd. We drive the generated gRPC
stubs (shipped by ``aetcd``) with ``grpc.aio`` ourselves rather than a high-level client,
because the contract needs precise control that the wrappers hide: watches resumed from a
revision, compaction reported instead of skipped, lease keep-alive with a deadline, and a
bounded deadline on every call.

Mapping: a key's version is its ``mod_revision``; ``NOT_EXISTS`` is ``mod_revision == 0``
(etcd compares an absent key as zeroes). Every conditional write is one ``Txn`` whose
failure branch reads the key, so a lost compare-and-set reports the version it found.

Failure behaviour:

* every unary call carries a deadline (``timeout``, default 5 s) and waits for a connection
  up to that deadline; when etcd cannot be reached it raises
  :class:`api.StoreUnavailableError`. Reads are retried within the deadline; writes are not
  (a write that failed in flight may or may not have been applied: the caller re-reads);
* a watch reconnects on its own and resumes at the revision after the last one it
  delivered, so nothing is lost or repeated; history compacted meanwhile raises
  :class:`api.WatchCompactedError`;
* a session renews its lease every TTL/3; if no renewal succeeds before the lease's TTL
  runs out (counted from the last renewal request that etcd answered), the session is lost:
  ``on_lost`` callbacks run once and the lease is revoked in the background as soon as
  etcd answers again (etcd extends leases when it restarts, so without that the stale
  ephemeral keys would linger for another TTL).

TLS (``tls``: trusted CAs, and a client certificate when etcd runs with
``--client-cert-auth``): every channel is a TLS channel; a server etcd does not trust us on,
or one whose certificate does not chain to our CAs, fails the handshake and the call raises
:class:`api.StoreUnavailableError` carrying gRPC's reason. When the files rotate, the next
call opens new channels with the new credentials; the old ones are closed after
``RETIRED_CHANNEL_GRACE`` (the calls on them are over by then; a watch or keep-alive still on
one reconnects on the new channel and resumes as after any broken stream).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import grpc.aio
from aetcd import rpc

from magnetar.common import backoff, grpctls
from magnetar.metadata import api, keys, stats
from magnetar.metadata.lease import LeaseState

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0
"""Seconds an operation may take, waiting for etcd included, before StoreUnavailableError."""

_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # Detect dead connections under long-lived streams (etcd allows pings every 5 s).
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 8 * 1024 * 1024),
]

RETIRED_CHANNEL_GRACE = 30.0
"""Seconds a channel replaced after a TLS rotation stays open (at least 3 timeouts)."""

_UNAVAILABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,  # "database space exceeded" needs an operator
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class _Conn:
    """One channel to one etcd endpoint, with its stubs."""

    def __init__(self, endpoint: Endpoint, tls: grpctls.ClientTls | None = None) -> None:
        self.endpoint = endpoint
        self.channel = grpctls.open_channel(str(endpoint), _CHANNEL_OPTIONS, tls)
        self.kv = rpc.KVStub(self.channel)
        self.watch = rpc.WatchStub(self.channel)
        self.lease = rpc.LeaseStub(self.channel)

    def failing(self) -> bool:
        state = self.channel.get_state(try_to_connect=True)
        return bool(state == grpc.ChannelConnectivity.TRANSIENT_FAILURE)


def _b(text: str) -> bytes:
    return text.encode()


def _range_end(prefix_slash: bytes) -> bytes:
    """The smallest key above every key starting with ``prefix_slash`` (which ends in '/')."""
    return prefix_slash[:-1] + b"0"  # '0' follows '/'


def _record(kv: Any) -> api.Record:
    lease = int(kv.lease)
    return api.Record(
        key=bytes(kv.key).decode(),
        value=bytes(kv.value),
        version=api.Version(int(kv.mod_revision)),
        create_revision=int(kv.create_revision),
        session_id=lease or None,
    )


def _error(exc: grpc.aio.AioRpcError, endpoint: Endpoint) -> api.MetadataError:
    """Map a gRPC failure to the store's named errors."""
    code, details = exc.code(), exc.details() or ""
    where = f"etcd {endpoint}: {code.name} {details}"
    if code in _UNAVAILABLE_CODES:
        return api.StoreUnavailableError(where)
    if "lease not found" in details:
        return api.SessionLostError(where)
    if "request is too large" in details:
        return api.ValueTooLargeError(where)
    if "duplicate key" in details or "too many operations" in details:
        return api.InvalidTxnError(where)
    return api.MetadataError(where)


class EtcdSession(LeaseState):
    """An etcd lease kept alive by a background task, with a loss watchdog."""

    def __init__(self, store: EtcdStore, *, lease_id: int, ttl: float, granted_at: float) -> None:
        super().__init__(lease_id, ttl)
        self._store = store
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._expiry = loop.call_at(granted_at + ttl, self._expired)
        self._task = loop.create_task(self._keepalive(), name=f"etcd-lease-{lease_id:x}")

    async def close(self) -> None:
        """Stop renewing and revoke the lease: its keys disappear now."""
        if self._closed or self._lost:
            self._closed = True
            return
        self._closed = True
        self._stop()
        try:
            await self._store._call("lease", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=self._id))
        except api.SessionLostError:
            pass  # already gone

    def _stop(self) -> None:
        self._expiry.cancel()
        self._task.cancel()
        self._store._sessions.discard(self)

    def _renewed(self, sent_at: float, ttl: int) -> None:
        self._expiry.cancel()
        self._expiry = self._loop.call_at(sent_at + ttl, self._expired)

    def _expired(self) -> None:
        """The TTL ran out without a renewal (or etcd said the lease is gone)."""
        if self._lost or self._closed:
            return
        log.warning("etcd session %x lost: not renewed within its %ss TTL", self._id, self._ttl)
        self._lost = True
        self._stop()
        self._store._revoke_later(self._id)
        self._tell_lost()

    async def _keepalive(self) -> None:
        request = rpc.LeaseKeepAliveRequest(ID=self._id)
        # retries well within the lease's TTL, so that a renewal lands before it runs out
        delays = backoff.Backoff(
            initial_s=min(0.05, self._ttl / 20), max_s=min(1.0, self._ttl / 10)
        )
        while True:
            conn = self._store._pick()
            call = conn.lease.LeaseKeepAlive(wait_for_ready=True)
            try:
                while True:
                    sent_at = self._loop.time()
                    await call.write(request)
                    response = await call.read()
                    if response is grpc.aio.EOF:
                        raise ConnectionError("keep-alive stream ended")
                    if int(response.TTL) <= 0:  # etcd no longer knows the lease
                        self._expired()
                        return
                    self._renewed(sent_at, int(response.TTL))
                    delays.reset()
                    await asyncio.sleep(self._ttl / 3)
            except Exception as exc:  # keep trying until the watchdog says the TTL ran out
                log.info("etcd session %x: keep-alive failed (%s), retrying", self._id, exc)
                self._store._rotate(conn)
                await asyncio.sleep(delays.next())
            finally:
                call.cancel()


class EtcdStore:
    """The etcd backend of :class:`api.MetadataStore`. Open it with :meth:`open`."""

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        *,
        timeout: float,
        tls: grpctls.ClientTls | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self._endpoints = list(endpoints)
        self._timeout = timeout
        self._conns: list[_Conn | None] = [None] * len(self._endpoints)
        self._current = 0
        self._closed = False
        self._sessions: set[EtcdSession] = set()
        self._watch_calls: set[Any] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._tls = tls
        self._tls_generation = tls.refresh() if tls is not None else 0
        self._retired: list[_Conn] = []

    @classmethod
    async def open(
        cls,
        endpoints: Sequence[Endpoint],
        *,
        op_timeout: float = DEFAULT_TIMEOUT,
        tls: grpctls.ClientTls | None = None,
    ) -> EtcdStore:
        """Connect to etcd (over TLS with ``tls``); raises StoreUnavailableError when it does
        not answer in time (a refused TLS handshake included, with gRPC's reason)."""
        store = cls(endpoints, timeout=op_timeout, tls=tls)
        try:
            await store.revision()
        except api.StoreUnavailableError as err:
            why = await store._why_unreachable()
            await store.close()
            raise api.StoreUnavailableError(f"{err} ({why})" if why else str(err)) from err
        except BaseException:
            await store.close()
            raise
        return store

    async def _why_unreachable(self) -> str:
        """gRPC's reason each endpoint cannot be reached (a refused TLS handshake, a refused
        connection): a call that does not wait for the channel fails with it at once."""
        reasons = []
        for index, endpoint in enumerate(self._endpoints):
            stub = self._conn_at(index).kv
            try:
                await stub.Range(
                    rpc.RangeRequest(key=b"/", count_only=True), timeout=1.0, wait_for_ready=False
                )
            except grpc.aio.AioRpcError as exc:
                reasons.append(f"{endpoint}: {exc.details() or exc.code().name}")
        return "; ".join(reasons)

    @property
    def timeout(self) -> float:
        return self._timeout

    # --- connections and calls ----------------------------------------------------------------

    def _conn_at(self, index: int) -> _Conn:
        conn = self._conns[index]
        if conn is None:
            conn = self._conns[index] = _Conn(self._endpoints[index], self._tls)
        return conn

    def _follow_rotation(self) -> None:
        """After the TLS files rotated: new channels for new calls, the old ones closed
        after a grace period."""
        if self._tls is None:
            return
        generation = self._tls.refresh()
        if generation == self._tls_generation:
            return
        self._tls_generation = generation
        retired = [conn for conn in self._conns if conn is not None]
        self._conns = [None] * len(self._endpoints)
        log.info("etcd: TLS credentials rotated; new channels for new calls")
        if not retired:
            return
        self._retired.extend(retired)

        async def close_retired() -> None:
            await asyncio.sleep(max(RETIRED_CHANNEL_GRACE, 3 * self._timeout))
            for conn in retired:
                self._retired.remove(conn)
                await conn.channel.close()

        task = asyncio.get_running_loop().create_task(close_retired(), name="etcd-retire")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _pick(self) -> _Conn:
        """The current endpoint's connection, skipping endpoints known to be failing."""
        if self._closed:
            raise api.StoreClosedError("the etcd store is closed")
        self._follow_rotation()
        for step in range(len(self._endpoints)):
            index = (self._current + step) % len(self._endpoints)
            conn = self._conn_at(index)
            if len(self._endpoints) == 1 or not conn.failing():
                self._current = index
                return conn
        return self._conn_at(self._current)

    def _rotate(self, conn: _Conn) -> None:
        if len(self._endpoints) > 1 and self._conns[self._current] is conn:
            self._current = (self._current + 1) % len(self._endpoints)

    async def _call(self, service: str, method: str, request: Any, *, retry: bool = False) -> Any:
        """One unary call with the store's deadline; ``retry`` (reads only) retries on
        unavailability until the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        delays = backoff.Backoff(initial_s=0.05, max_s=1.0)
        while True:
            conn = self._pick()
            stub = getattr(conn, service)
            remaining = deadline - loop.time()
            try:
                return await getattr(stub, method)(
                    request, timeout=max(remaining, 0.001), wait_for_ready=True
                )
            except grpc.aio.AioRpcError as exc:
                if self._closed:
                    raise api.StoreClosedError("the etcd store is closed") from exc
                error = _error(exc, conn.endpoint)
                if isinstance(error, api.StoreUnavailableError):
                    self._rotate(conn)
                    delay = delays.next()
                    if retry and loop.time() + delay < deadline:
                        await asyncio.sleep(delay)
                        continue
                raise error from exc

    async def _range(self, request: Any) -> Any:
        return await self._call("kv", "Range", request, retry=True)

    # --- reads --------------------------------------------------------------------------------

    @stats.timed("get")
    async def get(self, key: str) -> api.Record | None:
        response = await self._range(rpc.RangeRequest(key=api.check_key(key)))
        return _record(response.kvs[0]) if response.kvs else None

    async def revision(self) -> int:
        response = await self._range(rpc.RangeRequest(key=b"/", count_only=True))
        return int(response.header.revision)

    async def scan(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = api.DEFAULT_PAGE_SIZE,
    ) -> api.Page:
        p = _b(api.check_prefix(prefix))
        api.check_limit(limit)
        start = p
        if start_after is not None and _b(start_after) >= p:
            start = _b(start_after) + b"\x00"
        response = await self._range(
            rpc.RangeRequest(key=start, range_end=_range_end(p), limit=limit)
        )
        return api.Page(records=[_record(kv) for kv in response.kvs], more=bool(response.more))

    def scan_all(
        self, prefix: str, *, page_size: int = api.DEFAULT_PAGE_SIZE
    ) -> AsyncIterator[api.Record]:
        return api.scan_pages(self.scan, prefix, page_size)

    async def children(self, parent: str) -> list[str]:
        p = _b(api.check_prefix(parent))
        end = _range_end(p)
        names: list[str] = []
        start = p
        while True:
            response = await self._range(
                rpc.RangeRequest(key=start, range_end=end, limit=1000, keys_only=True)
            )
            if not response.kvs:
                break
            for kv in response.kvs:
                name = bytes(kv.key)[len(p) :].split(b"/", 1)[0]
                if name and (not names or names[-1] != name.decode()):
                    names.append(name.decode())
            if not response.more:
                break
            last = bytes(response.kvs[-1].key)
            child = p + last[len(p) :].split(b"/", 1)[0]
            # Skip the rest of the last child's subtree; keys like child + '-x' sort before it.
            start = child + b"0" if last.startswith(child + b"/") else last + b"\x00"
        return sorted(set(names))

    # --- writes -------------------------------------------------------------------------------

    @stats.timed("put")
    async def put(
        self,
        key: str,
        value: bytes,
        *,
        expected_version: api.Version | None = None,
        session: api.Session | None = None,
    ) -> api.Version:
        raw = api.check_key(key)
        api.check_value(key, value)
        put = rpc.PutRequest(key=raw, value=bytes(value), lease=self._lease_of(session))
        if expected_version is None:
            response = await self._call("kv", "Put", put)
            stats.put_bytes(len(value))
            return api.Version(int(response.header.revision))
        response = await self._call(
            "kv",
            "Txn",
            rpc.TxnRequest(
                compare=[self._compare(raw, expected_version)],
                success=[rpc.RequestOp(request_put=put)],
                failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=raw))],
            ),
        )
        if not response.succeeded:
            raise api.BadVersionError(key, expected_version, self._found(response))
        stats.put_bytes(len(value))
        return api.Version(int(response.header.revision))

    @stats.timed("del")
    async def delete(self, key: str, *, expected_version: api.Version | None = None) -> None:
        raw = api.check_key(key)
        if expected_version is None:
            response = await self._call("kv", "DeleteRange", rpc.DeleteRangeRequest(key=raw))
            if int(response.deleted) == 0:
                raise api.NotFoundError(key)
            return
        response = await self._call(
            "kv",
            "Txn",
            rpc.TxnRequest(
                compare=[self._compare(raw, expected_version)],
                success=[rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=raw))],
                failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=raw))],
            ),
        )
        if response.succeeded:
            if int(response.responses[0].response_delete_range.deleted) == 0:
                raise api.NotFoundError(key)
            return
        actual = self._found(response)
        if actual == api.NOT_EXISTS:
            raise api.NotFoundError(key)
        raise api.BadVersionError(key, expected_version, actual)

    async def delete_prefix(self, prefix: str) -> int:
        p = _b(api.check_prefix(prefix))
        ops = [
            rpc.RequestOp(
                request_delete_range=rpc.DeleteRangeRequest(key=p, range_end=_range_end(p))
            )
        ]
        if prefix != "/":
            ops.append(rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=_b(prefix))))
        response = await self._call("kv", "Txn", rpc.TxnRequest(success=ops))
        return sum(int(r.response_delete_range.deleted) for r in response.responses)

    async def txn(
        self,
        compares: Sequence[api.Compare],
        success: Sequence[api.Op],
        failure: Sequence[api.Op] = (),
    ) -> api.TxnResult:
        api.check_txn(compares, success, failure)
        request = rpc.TxnRequest(
            compare=[self._compare(_b(c.key), c.version) for c in compares],
            success=[self._op(op) for op in success],
            failure=[self._op(op) for op in failure],
        )
        response = await self._call("kv", "Txn", request)
        ok = bool(response.succeeded)
        rev = api.Version(int(response.header.revision))
        versions = {
            op.key: rev if isinstance(op, api.Put) else api.NOT_EXISTS
            for op in (success if ok else failure)
        }
        return api.TxnResult(succeeded=ok, versions=versions)

    async def next_id(self, name: str) -> int:
        key = keys.id_counter(name)
        raw = _b(key)
        response = await self._range(rpc.RangeRequest(key=raw))
        kvs = response.kvs
        while True:
            current = int(bytes(kvs[0].value)) if kvs else 0
            version = int(kvs[0].mod_revision) if kvs else 0
            new = current + 1
            response = await self._call(
                "kv",
                "Txn",
                rpc.TxnRequest(
                    compare=[self._compare(raw, api.Version(version))],
                    success=[
                        rpc.RequestOp(request_put=rpc.PutRequest(key=raw, value=str(new).encode()))
                    ],
                    failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=raw))],
                ),
            )
            if response.succeeded:
                return new
            kvs = response.responses[0].response_range.kvs

    async def compact(self, revision: int) -> None:
        try:
            await self._call("kv", "Compact", rpc.CompactionRequest(revision=revision))
        except api.MetadataError as exc:
            if "compacted" in str(exc):  # already compacted at or past it: nothing to do
                return
            raise

    @staticmethod
    def _compare(raw: bytes, version: api.Version) -> Any:
        return rpc.Compare(
            key=raw,
            target=rpc.Compare.MOD,
            result=rpc.Compare.EQUAL,
            mod_revision=int(version),
        )

    @staticmethod
    def _found(response: Any) -> api.Version:
        """The version read by a failed Txn's failure branch (a single range)."""
        kvs = response.responses[0].response_range.kvs
        return api.Version(int(kvs[0].mod_revision)) if kvs else api.NOT_EXISTS

    def _op(self, op: api.Op) -> Any:
        if isinstance(op, api.Put):
            return rpc.RequestOp(
                request_put=rpc.PutRequest(
                    key=_b(op.key), value=bytes(op.value), lease=self._lease_of(op.session)
                )
            )
        return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=_b(op.key)))

    # --- sessions -----------------------------------------------------------------------------

    def _lease_of(self, session: api.Session | None) -> int:
        if session is None:
            return 0
        if not isinstance(session, EtcdSession) or session._store is not self:
            raise ValueError("the session belongs to another store")
        if not session.usable:
            raise api.SessionLostError(f"session {session.id:x} is lost or closed")
        return session.id

    async def session(self, ttl: float) -> api.Session:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl}")
        granted_at = asyncio.get_running_loop().time()
        response = await self._call(
            "lease", "LeaseGrant", rpc.LeaseGrantRequest(TTL=max(1, math.ceil(ttl)))
        )
        if response.error:
            raise api.MetadataError(f"etcd refused a lease: {response.error}")
        session = EtcdSession(
            self, lease_id=int(response.ID), ttl=float(response.TTL), granted_at=granted_at
        )
        self._sessions.add(session)
        return session

    def _revoke_later(self, lease_id: int) -> None:
        """Revoke a lost lease once etcd answers (bounded), so its keys go at once."""

        async def revoke() -> None:
            loop = asyncio.get_running_loop()
            give_up = loop.time() + max(60.0, 4 * self._timeout)
            delays = backoff.Backoff(initial_s=0.2, max_s=5.0)
            while loop.time() < give_up:
                try:
                    await self._call("lease", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease_id))
                    return
                except api.SessionLostError:
                    return
                except api.StoreUnavailableError:
                    await asyncio.sleep(delays.next())

        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(revoke(), name=f"etcd-revoke-{lease_id:x}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- watches ------------------------------------------------------------------------------

    def watch(
        self,
        key: str,
        *,
        prefix: bool = False,
        start_revision: int | None = None,
    ) -> AsyncIterator[api.WatchEvent]:
        if prefix:
            p = _b(api.check_prefix(key))
            start_key, range_end = p, _range_end(p)
        else:
            start_key, range_end = api.check_key(key), b""
        if start_revision is not None and start_revision < 1:
            raise ValueError(f"start_revision must be positive, got {start_revision}")
        if self._closed:
            raise api.StoreClosedError("the etcd store is closed")
        return self._watch(start_key, range_end, start_revision)

    async def _watch(
        self, key: bytes, range_end: bytes, start_revision: int | None
    ) -> AsyncIterator[api.WatchEvent]:
        next_rev = start_revision if start_revision is not None else await self.revision() + 1
        delays = backoff.Backoff(initial_s=0.05, max_s=1.0)
        while not self._closed:
            conn = self._pick()
            call = conn.watch.Watch(wait_for_ready=True)
            self._watch_calls.add(call)
            try:
                create = rpc.WatchCreateRequest(
                    key=key, range_end=range_end, start_revision=next_rev
                )
                await call.write(rpc.WatchRequest(create_request=create))
                while True:
                    response = await call.read()
                    if response is grpc.aio.EOF:
                        raise ConnectionError("watch stream ended")
                    if response.compact_revision:
                        raise api.WatchCompactedError(int(response.compact_revision))
                    if response.canceled:
                        raise api.MetadataError(
                            f"etcd canceled the watch: {response.cancel_reason}"
                        )
                    if response.created:
                        delays.reset()
                    last = next_rev - 1
                    for event in response.events:
                        rev = int(event.kv.mod_revision)
                        if rev < next_rev:
                            continue  # already delivered before a reconnect
                        last = max(last, rev)
                        yield api.WatchEvent(
                            type=api.EventType.PUT
                            if event.type == rpc.Event.PUT
                            else api.EventType.DELETE,
                            key=bytes(event.kv.key).decode(),
                            value=bytes(event.kv.value),
                            revision=rev,
                        )
                    next_rev = last + 1
            except (grpc.aio.AioRpcError, ConnectionError) as exc:
                if self._closed:
                    return
                log.info("etcd watch broke (%s); resuming at revision %d", exc, next_rev)
                self._rotate(conn)
                await asyncio.sleep(delays.next())
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closed and (task is None or not task.cancelling()):
                    return  # our own close() cancelled the call
                raise
            finally:
                self._watch_calls.discard(call)
                call.cancel()

    # --- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop keep-alives and watches and close the channels; leases are not revoked."""
        if self._closed:
            return
        self._closed = True
        for session in list(self._sessions):
            session._stop()
        for task in list(self._background):
            task.cancel()
        for call in list(self._watch_calls):
            call.cancel()
        for conn in [*self._conns, *self._retired]:
            if conn is not None:
                await conn.channel.close()
        self._retired.clear()
