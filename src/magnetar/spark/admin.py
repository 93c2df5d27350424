"""The admin REST calls the Spark source plans with, on the driver: partitions of a topic,
the topics of a namespace, each partition's last message id and ledgers (to bound batches)
and the durable subscription the source advances on commit. Plain ``urllib`` so executors
and drivers need nothing beyond the standard library and the official client."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from magnetar.spark.options import MagnetarSourceError, Position, rest_path
from magnetar.wire import urls

TIMEOUT_S = 10.0


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
    """Fail fast, naming the URL, when nothing listens there (pulsar:// or http(s)://)."""
    if "://" in url and not url.startswith("http"):
        try:
            host, port = urls.parse_service_url(url).first
        except urls.BadUrlError as exc:
            raise MagnetarSourceError(f"{what}: {exc}") from None
    else:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=3.0):
            return
    except OSError as err:
        raise MagnetarSourceError(f"{what} {url} is unreachable: {err}") from None


class Admin:
    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/") + "/admin/v2/"

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(  # noqa: S310 (http(s) only: checked by options.admin_url)
            self.base + quote(path), data=data, method=method
        )
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310
                text = resp.read()
                return resp.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as err:
            text = err.read()
            try:
                reason = json.loads(text).get("reason", text.decode(errors="replace"))
            except (ValueError, AttributeError):
                reason = text.decode(errors="replace")
            return err.code, reason
        except OSError as err:
            raise MagnetarSourceError(f"admin API {self.base} is unreachable: {err}") from None

    def _ok(self, method: str, path: str, body: Any = None) -> Any:
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
