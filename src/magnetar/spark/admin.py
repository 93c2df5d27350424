"""The admin REST calls the Spark source plans with, on the driver: partitions of a topic,
the topics of a namespace, each partition's last message id and ledgers (to bound batches)
and the durable subscription the source advances on commit, through the client layer's admin
client (:mod:`magnetar.client.admin`), with the source's credentials and TLS trust."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from magnetar.client import admin, blocking
from magnetar.client.connection import ConnectionLostError
from magnetar.spark.access import ANONYMOUS, Access
from magnetar.spark.options import MagnetarSourceError, Position, rest_path
from magnetar.wire import session, urls

CHECK_TIMEOUT_S = 10.0


class TopicNotFound(MagnetarSourceError):
    """The topic named by the options is not there."""


@dataclass(frozen=True)
class Ledger:
    ledger_id: int
    entries: int
    size: int


@dataclass(frozen=True)
class PartitionState:
    """What the broker stores of one topic partition right now."""

    last: Position | None  # None: nothing stored
    ledgers: tuple[Ledger, ...]

    def ledger(self, ledger_id: int) -> Ledger | None:
        for ledger in self.ledgers:
            if ledger.ledger_id == ledger_id:
                return ledger
        return None

    @property
    def first_ledger(self) -> int | None:
        for ledger in self.ledgers:
            if ledger.entries > 0:
                return ledger.ledger_id
        return None


def check_reachable(url: str, *, what: str) -> None:
    """Fail fast, naming the URL, when nothing listens at an http(s):// URL."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=CHECK_TIMEOUT_S):
            return
    except OSError as err:
        raise MagnetarSourceError(f"{what} {url} is unreachable: {err}") from None


def check_service(url: str, access: Access, *, what: str = "serviceUrl") -> None:
    """Fail fast, naming the URL and the reason, when the service URL cannot be connected
    to as the options say: nothing listens, TLS fails, or the broker refuses the
    credentials (the official client would retry a refused CONNECT until its operation
    timeout, so a write or a read would fail half a minute later, less clearly)."""
    try:
        service = urls.parse_service_url(url)
    except urls.BadUrlError as exc:
        raise MagnetarSourceError(f"{what}: {exc}") from None
    deadline = time.monotonic() + CHECK_TIMEOUT_S
    try:
        conn = blocking.BlockingConnection(
            service.first,
            deadline=deadline,
            ssl_context=access.ssl_context() if service.tls else None,
            auth=access.credentials(),
        )
    except session.HandshakeRefusedError as exc:
        raise MagnetarSourceError(f"{what} {url} refused the connection: {exc}") from None
    except ConnectionLostError as exc:
        raise MagnetarSourceError(f"{what} {url} is unreachable: {exc}") from None
    conn.close()


class Admin:
    """The source's calls, over the client layer's admin client (credentials, TLS trust,
    redirects and Pulsar's error body are its business)."""

    def __init__(self, http: admin.AdminClient) -> None:
        self.http = http
        self.base = http.base + "/admin/v2/"

    @classmethod
    def at(cls, url: str, access: Access = ANONYMOUS) -> Admin:
        """The calls to the admin API at ``url`` with ``access``'s credentials and trust."""
        return cls(access.admin_client(url))

    def _call(self, method: str, path: str, body: Any = admin.NO_BODY) -> tuple[int, Any]:
        """(status, answer): the decoded answer, or the reason of an error status."""
        try:
            return 200, self.http.call(method, "/admin/v2/" + quote(path), body)
        except admin.AdminError as err:
            return err.status, err.reason
        except (admin.AdminUnreachable, admin.AdminConfigError) as err:
            raise MagnetarSourceError(f"admin API {self.http.base}: {err}") from None

    def _ok(self, method: str, path: str, body: Any = admin.NO_BODY) -> Any:
        status, answer = self._call(method, path, body)
        if status >= 300:
            raise MagnetarSourceError(f"admin API {method} {path}: HTTP {status}: {answer}")
        return answer

    def partitions(self, topic: str) -> int:
        """The partition count of a partitioned topic; 0 for a non-partitioned one."""
        return int(self._ok("GET", f"{rest_path(topic)}/partitions").get("partitions", 0))

    def expand(self, topic: str) -> list[str]:
        """A topic's partitions, or the topic itself; TopicNotFound when neither exists."""
        n = self.partitions(topic)
        if n > 0:
            return [f"{topic}-partition-{i}" for i in range(n)]
        status, answer = self._call("GET", f"{rest_path(topic)}/lastMessageId")
        if status == 404:
            raise TopicNotFound(f"topic {topic} does not exist")
        if status >= 300:
            raise MagnetarSourceError(f"topic {topic}: HTTP {status}: {answer}")
        return [topic]

    def namespace_topics(self, namespace: str) -> list[str]:
        """Every topic partition of a namespace (``persistent://tenant/ns``), partitioned
        topics expanded (also partitions nothing was written to yet)."""
        path = rest_path(namespace + "/x").rsplit("/", 1)[0]
        plain = self._ok("GET", path)
        partitioned = self._ok("GET", f"{path}/partitioned")
        found = {t for t in plain if t.startswith(namespace + "/")}
        for parent in partitioned:
            found.discard(parent)
            found.update(self.expand(parent))
        return sorted(found)

    def state(self, partition: str) -> PartitionState:
        status, last = self._call("GET", f"{rest_path(partition)}/lastMessageId")
        if status == 404:
            raise TopicNotFound(f"topic {partition} does not exist")
        if status >= 300:
            raise MagnetarSourceError(f"topic {partition}: HTTP {status}: {last}")
        stats = self._ok("GET", f"{rest_path(partition)}/internalStats")
        ledgers = tuple(
            Ledger(int(lg["ledgerId"]), int(lg["entries"]), int(lg["size"]))
            for lg in stats.get("ledgers", [])
        )
        position: Position | None = None
        if int(last["entryId"]) >= 0:
            position = Position(
                int(last["ledgerId"]), int(last["entryId"]), int(last["batchIndex"])
            )
        return PartitionState(position, ledgers)

    def ensure_subscription(self, partition: str, name: str, at: Position | None) -> None:
        """Create the durable subscription (at ``at``, earliest when None) unless it exists."""
        body = {"ledgerId": -1, "entryId": -1}
        if at is not None:
            body = {"ledgerId": at.ledger, "entryId": at.entry}
        status, answer = self._call("PUT", f"{rest_path(partition)}/subscription/{name}", body)
        if status not in (204, 200, 409):
            raise MagnetarSourceError(
                f"creating subscription {name} on {partition}: HTTP {status}: {answer}"
            )

    def move_subscription(self, partition: str, name: str, next_entry: Position) -> None:
        """Move the durable subscription so ``next_entry`` is the next message it delivers."""
        body = {"ledgerId": next_entry.ledger, "entryId": next_entry.entry}
        status, answer = self._call(
            "POST", f"{rest_path(partition)}/subscription/{name}/resetcursor", body
        )
        if status == 404:
            self.ensure_subscription(partition, name, next_entry)
        elif status >= 300:
            raise MagnetarSourceError(
                f"moving subscription {name} on {partition}: HTTP {status}: {answer}"
            )

    def deduplication(self, topic: str) -> bool | None:
        status, answer = self._call("GET", f"{rest_path(topic)}/deduplicationEnabled")
        if status >= 300 or answer is None:
            return None
        return bool(answer)

    def schemas(self, topic: str) -> Any:
        """Every version of ``topic``'s schema (``getSchemaResponses``); None when it has no
        schema."""
        _, rest = topic.split("://", 1)
        status, answer = self._call("GET", f"schemas/{rest}/schemas")
        if status == 404:
            return None
        if status >= 300:
            raise MagnetarSourceError(f"the schemas of {topic}: HTTP {status}: {answer}")
        return answer
