"""Replicated subscriptions: a subscription's mark-delete position carried over to the same
subscription on the other clusters of a replicated topic (Pulsar's
``ReplicatedSubscriptionsController``; docs/geo-replication.md, "Replicated subscriptions").

Why this module exists: positions are per cluster (each cluster stores the topic in its own
ledgers, messages from both sides interleaved in its own order), so a position acknowledged
on one cluster means nothing on another. The clusters map positions through marker entries
written into the topic itself, which the replicators carry (``wire.markers``):

1. every ``replicatedSubscriptionsSnapshotFrequencyMillis``, while the topic has a replicated
   subscription and new messages, the controller writes a *snapshot request* (replicated to
   every other cluster);
2. a cluster whose replicator stores a request answers with a *snapshot response* naming
   the position where the request landed in its copy, replicated to the asking cluster only;
3. when every other cluster answered (twice with more than one other cluster, as Pulsar
   does, so that messages a third cluster sent meanwhile are covered), the asking cluster
   has a *snapshot*: its own position of the last response corresponds to the others'
   positions of the request. Everything before the remote position was, on the local side,
   before the local one: the remote's own messages came back on the same replicator ahead of
   its response, and the local messages ahead of the request went out ahead of it. The
   snapshot is kept in memory and written to the topic (local only: dispatch reads it back
   after the topic moves to another broker);
4. once a replicated subscription's mark-delete position reaches a snapshot's local
   position, the controller writes an *update* (replicated to all) with the other clusters'
   positions; each cluster moves its replicated subscription of that name there (creating
   it when it does not exist, as Pulsar does).

A consumer that fails over to another cluster therefore resumes at most the messages of
about one snapshot interval (plus what was acknowledged individually beyond the mark-delete
position) before where it left off, never after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from google.protobuf.message import DecodeError

from magnetar.managed_ledger.api import ManagedLedger, ManagedLedgerError, Position
from magnetar.wire import markers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """The broker's switches (broker.conf keys of the same names)."""

    enabled: bool = True
    """enableReplicatedSubscriptions: answer snapshot requests and keep subscriptions
    flagged by their consumers replicated; off, no marker is written or answered."""
    snapshot_frequency_s: float = 1.0
    """replicatedSubscriptionsSnapshotFrequencyMillis: how often a snapshot is started."""
    snapshot_timeout_s: float = 30.0
    """replicatedSubscriptionsSnapshotTimeoutSeconds: a snapshot not answered by then is
    abandoned (a remote cluster down), and the next one starts."""
    max_cached_snapshots: int = 10
    """replicatedSubscriptionsSnapshotMaxCachedPerSubscription: completed snapshots kept
    (the oldest go first)."""


class Subscriptions(Protocol):
    """What the controller needs of the topic's subscriptions
    (:class:`magnetar.broker.subscriptions.topic_subscriptions.TopicSubscriptionsImpl`)."""

    def replicated(self) -> list[tuple[str, Position]]:
        """The replicated subscriptions and their mark-delete positions."""

    async def move_replicated(self, name: str, position: Position) -> None:
        """Move replicated subscription ``name`` forward to ``position`` (creating it,
        replicated, when it does not exist)."""


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: str
    local: Position
    """The local position the snapshot applies from."""
    remote: dict[str, tuple[int, int]]
    """The other clusters' corresponding positions."""


@dataclass
class _Building:
    """A snapshot whose responses are awaited (Pulsar's ReplicatedSubscriptionsSnapshotBuilder)."""

    snapshot_id: str
    remotes: frozenset[str]
    started: float
    rounds: int
    responses: dict[str, tuple[int, int]] = field(default_factory=dict)


class ReplicatedSubscriptionsController:
    """One persistent topic's replicated subscriptions (see the module docstring)."""

    def __init__(
        self,
        *,
        topic: str,
        managed_ledger: ManagedLedger,
        local: str,
        settings: Settings,
        remotes: Callable[[], Collection[str]],
        subscriptions: Subscriptions,
        published: Callable[[], int],
        entries_added: Callable[[], None],
    ) -> None:
        self.topic = topic
        self.ml = managed_ledger
        self.local = local
        self.settings = settings
        self.remotes = remotes
        """The clusters the topic is replicated to now (its running replicators)."""
        self.subscriptions = subscriptions
        self.published = published
        """Messages published on the topic so far (its producers' and replicators')."""
        self.entries_added = entries_added
        self.snapshots: list[Snapshot] = []
        """Completed snapshots, oldest first."""
        self._sent: dict[str, str] = {}
        """Subscription -> the snapshot its last update was made from."""
        self._building: _Building | None = None
        self._markers_in = 0
        """Marker entries other clusters' replicators stored here (not new messages)."""
        self._published_at_last_snapshot = -1
        """(-1: one snapshot after the topic loads, new messages or not: the snapshots in
        memory went with the previous load, and dispatch reads back only the snapshot markers
        a subscription had not read yet; those it had were acknowledged with the markers.)"""
        self._task: asyncio.Task[None] | None = None
        self._chores: set[asyncio.Task[None]] = set()
        self.closed = False
        self.snapshots_completed = 0
        self.snapshots_timed_out = 0
        self.updates_sent = 0
        self.updates_applied = 0

    # --- lifecycle ---------------------------------------------------------------------------

    def ensure_running(self) -> None:
        """Start the snapshot loop (a replicated subscription appeared); it ends by itself
        when there is none left."""
        if self.closed or not self.settings.enabled:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replicated subscriptions {self.topic}"
            )

    async def close(self) -> None:
        self.closed = True
        tasks = [t for t in (self._task, *self._chores) if t is not None]
        self._task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        while not self.closed:
            await asyncio.sleep(self.settings.snapshot_frequency_s)
            try:
                if not self.subscriptions.replicated():
                    return
                await self.round()
            except asyncio.CancelledError:
                raise
            except ManagedLedgerError as exc:
                log.info("%s: replicated subscriptions: %s", self.topic, exc)
            except Exception:
                log.exception("%s: replicated subscriptions round failed", self.topic)

    async def round(self) -> None:
        """Send the updates due, abandon a snapshot past its timeout, start the next one."""
        await self._send_updates()
        building = self._building
        now = time.monotonic()
        if building is not None and now - building.started > self.settings.snapshot_timeout_s:
            log.info(
                "%s: snapshot %s timed out waiting for %s",
                self.topic,
                building.snapshot_id,
                sorted(building.remotes - set(building.responses)),
            )
            self.snapshots_timed_out += 1
            self._building = building = None
            self._published_at_last_snapshot = -1  # (what it was to map still is: again)
        if building is not None:
            return
        remotes = frozenset(self.remotes())
        data_published = self.published() - self._markers_in
        if not remotes or data_published == self._published_at_last_snapshot:
            return  # nothing to map: not replicated, or no message since the last snapshot
        self._published_at_last_snapshot = data_published
        snapshot_id = str(uuid.uuid4())
        self._building = _Building(snapshot_id, remotes, now, rounds=1)
        await self._write(markers.snapshot_request(snapshot_id, self.local))

    async def _write(self, entry: bytes) -> Position:
        position = await self.ml.add_entry(entry)
        self.entries_added()
        return position

    # --- markers from the other clusters -----------------------------------------------------

    def received(self, position: Position, marker_type: int, payload: bytes) -> None:
        """Another cluster's replicator stored a marker here at ``position``."""
        self._markers_in += 1
        if self.closed or not self.settings.enabled:
            return
        try:
            if marker_type == markers.SNAPSHOT_REQUEST:
                snapshot_id, source = markers.parse_request(payload)
                entry = markers.snapshot_response(
                    snapshot_id,
                    reply_to=source,
                    cluster=self.local,
                    position=(position.ledger_id, position.entry_id),
                )
                self._spawn(self._write(entry))
            elif marker_type == markers.SNAPSHOT_RESPONSE:
                self._spawn(self._response(position, *markers.parse_response(payload)))
            elif marker_type == markers.UPDATE:
                name, ids = markers.parse_update(payload)
                if self.local in ids:
                    self._spawn(self._apply_update(name, Position(*ids[self.local])))
        except DecodeError as exc:
            log.warning("%s: marker at %s not readable: %s", self.topic, position, exc)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._chores.add(task)
        task.add_done_callback(self._chore_done)

    def _chore_done(self, task: asyncio.Task[None]) -> None:
        self._chores.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s: replicated subscriptions: %s", self.topic, task.exception())

    async def _response(
        self, position: Position, snapshot_id: str, cluster: str, ids: tuple[int, int]
    ) -> None:
        building = self._building
        if building is None or building.snapshot_id != snapshot_id:
            return  # an abandoned snapshot's (or another broker's, before a move)
        building.responses[cluster] = ids
        if not building.remotes <= set(building.responses):
            return
        if len(building.remotes) > 1 and building.rounds == 1:
            # a second round: what a third cluster sent before answering the first is then
            # before every second-round answer (Pulsar's two rounds)
            building.rounds = 2
            building.responses = {}
            await self._write(markers.snapshot_request(snapshot_id, self.local))
            return
        self._building = None
        snapshot = Snapshot(snapshot_id, position, dict(building.responses))
        self.add_snapshot(snapshot)
        self.snapshots_completed += 1
        await self._write(
            markers.snapshot(
                snapshot_id,
                local_cluster=self.local,
                local=(position.ledger_id, position.entry_id),
                ids=snapshot.remote,
            )
        )

    def snapshot_read(self, payload: bytes) -> None:
        """Dispatch read a snapshot marker this cluster wrote (after the topic moved here,
        the snapshots in memory are gone: they come back this way)."""
        try:
            snapshot_id, local, ids = markers.parse_snapshot(payload)
        except DecodeError as exc:
            log.warning("%s: snapshot marker not readable: %s", self.topic, exc)
            return
        if any(s.snapshot_id == snapshot_id for s in self.snapshots):
            return
        self.add_snapshot(Snapshot(snapshot_id, Position(*local), ids))
        self.ensure_running()

    def add_snapshot(self, snapshot: Snapshot) -> None:
        self.snapshots.append(snapshot)
        self.snapshots.sort(key=lambda s: s.local)
        while len(self.snapshots) > max(1, self.settings.max_cached_snapshots):
            self.snapshots.pop(0)

    # --- updates -----------------------------------------------------------------------------

    async def _send_updates(self) -> None:
        """For each replicated subscription, the latest snapshot its mark-delete position
        reached, sent once as an update; snapshots every subscription passed are dropped."""
        replicated = self.subscriptions.replicated()
        if not self.snapshots or not replicated:
            return
        for name, mark_delete in replicated:
            reached = [s for s in self.snapshots if s.local <= mark_delete]
            if not reached or self._sent.get(name) == reached[-1].snapshot_id:
                continue
            snapshot = reached[-1]
            await self._write(markers.update(name, snapshot.remote))
            self._sent[name] = snapshot.snapshot_id
            self.updates_sent += 1
        slowest = min(md for _, md in replicated)
        passed = [s for s in self.snapshots if s.local <= slowest]
        for snapshot in passed[:-1]:  # (the latest reached stays: it tells what was sent)
            self.snapshots.remove(snapshot)

    async def _apply_update(self, name: str, position: Position) -> None:
        if position > self.ml.last_confirmed_entry:
            log.warning(
                "%s: update of %s to %s, past the end of the topic: ignored",
                self.topic,
                name,
                position,
            )
            return
        await self.subscriptions.move_replicated(name, position)
        self.updates_applied += 1
        self.ensure_running()
