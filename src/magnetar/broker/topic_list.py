"""Topic list watchers (WATCH_TOPIC_LIST / WATCH_TOPIC_UPDATE): pattern consumers told of
new and deleted topics as they happen.

Why it exists: the Java client's pattern consumers (``topicsPattern``) open a watcher when the
broker announces ``supports_topic_watchers``; without one they poll GET_TOPICS_OF_NAMESPACE
every minute. A watcher answers the persistent topics of a namespace whose partitioned name
(without the ``persistent://`` scheme) matches the client's regex, then follows the metadata
store (managed-ledger records and partitioned-topic metadata of that namespace) and sends the
difference whenever topics appear or go. Every answer carries Pulsar's list hash (CRC32C of
the sorted names joined by ``,``, printed as the little-endian bytes in hex), which the client
compares with its own to decide whether to re-read the whole list.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Final

from magnetar.broker.contracts import BrokerError
from magnetar.common import backoff
from magnetar.metadata import api, keys
from magnetar.wire import pb
from magnetar.wire.frames import crc32c
from magnetar.wire.topics import TopicName

log = logging.getLogger(__name__)

MAX_PATTERN_LENGTH: Final = 4096
_SCHEME: Final = "://"
_DEBOUNCE_S: Final = 0.05

ListTopics = Callable[[str, str], Awaitable[list[str]]]
"""(tenant, namespace) -> full names of the namespace's persistent topics."""


def topics_hash(topics: list[str]) -> str:
    """Pulsar's ``TopicList.calculateHash``: CRC32C of the sorted names joined by ``,``, as
    Guava prints an int hash (its four bytes little-endian, in hex)."""
    crc = crc32c(",".join(sorted(topics)).encode())
    return crc.to_bytes(4, "little").hex()


def remove_domain_scheme(regex: str) -> str:
    """The regex without its leading ``persistent://`` / ``non-persistent://`` (Pulsar's
    ``TopicList.removeTopicDomainScheme``); raises BrokerError for another scheme."""
    if _SCHEME not in regex:
        return regex
    prefix, rest = regex.split(_SCHEME, 1)
    for domain in ("non-persistent", "persistent"):
        if prefix == domain:
            return rest
        if prefix.endswith(domain):
            return prefix[: -len(domain)] + rest
    raise BrokerError(pb.NotAllowedError, f"unsupported topic domain in pattern {regex!r}")


def compile_pattern(regex: str) -> re.Pattern[str]:
    if len(regex) > MAX_PATTERN_LENGTH:
        raise BrokerError(
            pb.NotAllowedError, f"topics pattern longer than {MAX_PATTERN_LENGTH} characters"
        )
    try:
        return re.compile(remove_domain_scheme(regex))
    except re.error as exc:
        raise BrokerError(pb.NotAllowedError, f"bad topics pattern {regex!r}: {exc}") from None


def matching(topics: list[str], pattern: re.Pattern[str]) -> list[str]:
    """The topics whose partitioned name, without scheme, matches ``pattern`` in full."""
    out = []
    for name in topics:
        base = TopicName.parse(name).base_name.full_name
        if pattern.fullmatch(base.split(_SCHEME, 1)[1]):
            out.append(name)
    return out


class TopicListWatcher:
    """One watcher of one connection."""

    def __init__(
        self,
        *,
        watcher_id: int,
        tenant: str,
        namespace: str,
        pattern: re.Pattern[str],
        store: api.MetadataStore,
        list_topics: ListTopics,
        send: Callable[[pb.BaseCommand], None],
    ) -> None:
        self.watcher_id = watcher_id
        self._tenant = tenant
        self._namespace = namespace
        self._pattern = pattern
        self._store = store
        self._list_topics = list_topics
        self._send = send
        self._topics: set[str] = set()
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def topics(self) -> list[str]:
        return sorted(self._topics)

    async def _current(self) -> set[str]:
        return set(matching(await self._list_topics(self._tenant, self._namespace), self._pattern))

    async def start(self) -> list[str]:
        """Read the matching topics and start following changes; returns the topics."""
        revision = await self._store.revision()
        self._topics = await self._current()
        ns = f"{keys.segment(self._tenant)}/{keys.segment(self._namespace)}/persistent"
        for parent in (f"{keys.MANAGED_LEDGERS}/{ns}", f"{keys.PARTITIONED_TOPICS}/{ns}"):
            self._tasks.append(asyncio.create_task(self._follow(parent, revision + 1)))
        self._tasks.append(asyncio.create_task(self._notify()))
        return self.topics

    async def _follow(self, parent: str, start_revision: int) -> None:
        """Mark the list dirty when a topic-level key below ``parent`` changes (cursor and
        other deeper records are ignored)."""
        delays = backoff.Backoff(initial_s=0.2, max_s=5.0)
        while True:
            try:
                async for event in self._store.watch(
                    parent, prefix=True, start_revision=start_revision
                ):
                    start_revision = event.revision + 1
                    if "/" not in event.key[len(parent) + 1 :]:
                        self._dirty.set()
                return
            except asyncio.CancelledError:
                raise
            except api.WatchCompactedError:
                start_revision = await self._store.revision() + 1
                self._dirty.set()
            except Exception as exc:
                log.info("topic list watcher %d: watch of %s: %s", self.watcher_id, parent, exc)
                await asyncio.sleep(delays.next())
                self._dirty.set()

    async def _notify(self) -> None:
        delays = backoff.Backoff(initial_s=0.2, max_s=5.0)
        while True:
            await self._dirty.wait()
            await asyncio.sleep(_DEBOUNCE_S)
            self._dirty.clear()
            try:
                now = await self._current()
            except Exception as exc:
                log.info("topic list watcher %d: listing failed: %s", self.watcher_id, exc)
                await asyncio.sleep(delays.next())
                self._dirty.set()
                continue
            delays.reset()
            added, deleted = now - self._topics, self._topics - now
            if not added and not deleted:
                continue
            self._topics = now
            cmd = pb.BaseCommand(type=pb.BaseCommand.WATCH_TOPIC_UPDATE)
            u = cmd.watchTopicUpdate
            u.watcher_id = self.watcher_id
            u.new_topics.extend(sorted(added))
            u.deleted_topics.extend(sorted(deleted))
            u.topics_hash = topics_hash(list(now))
            self._send(cmd)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()


async def open_watcher(
    cmd: pb.CommandWatchTopicList,
    *,
    store: api.MetadataStore,
    list_topics: ListTopics,
    send: Callable[[pb.BaseCommand], None],
) -> tuple[TopicListWatcher, pb.BaseCommand]:
    """A started watcher for ``cmd`` and its WATCH_TOPIC_LIST_SUCCESS (topics left out when
    the client's hash already matches). Raises BrokerError on a bad namespace or pattern."""
    tenant, sep, namespace = cmd.namespace.partition("/")
    if not sep or not tenant or not namespace or "/" in namespace:
        raise BrokerError(pb.InvalidTopicName, f"bad namespace name {cmd.namespace!r}")
    watcher = TopicListWatcher(
        watcher_id=cmd.watcher_id,
        tenant=tenant,
        namespace=namespace,
        pattern=compile_pattern(cmd.topics_pattern),
        store=store,
        list_topics=list_topics,
        send=send,
    )
    try:
        topics = await watcher.start()
    except BaseException:
        watcher.close()
        raise
    out = pb.BaseCommand(type=pb.BaseCommand.WATCH_TOPIC_LIST_SUCCESS)
    s = out.watchTopicListSuccess
    s.request_id = cmd.request_id
    s.watcher_id = cmd.watcher_id
    s.topics_hash = topics_hash(topics)
    if not (cmd.HasField("topics_hash") and cmd.topics_hash == s.topics_hash):
        s.topic.extend(topics)
    return watcher, out
