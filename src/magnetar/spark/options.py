"""The options of the ``magnetar`` Spark data source, parsed and checked on the driver before
any job runs: an unknown option, a malformed offsets JSON or a missing topic selector is a
``MagnetarSourceError`` naming the problem, not a failed task minutes later.

Positions are ``Position`` tuples ``(ledger, entry, batch)`` compared as tuples: a message of
a batch entry has its batch index, a message stored alone has batch ``-1`` (it sorts before
the messages of a batch entry with the same ids, so ``(L, E, -1)`` as an inclusive start
takes all of entry ``E``). ``MAX_BATCH`` stands for "after every message of the entry"."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from magnetar.wire import urls

MAX_BATCH: Final = 2**31 - 1
"""A batch index after every real one: ``(L, E, MAX_BATCH)`` is the end of entry ``E``."""


class MagnetarSourceError(ValueError):
    """Bad options or an unusable topic, reported on the driver before a job starts."""


class Position(NamedTuple):
    ledger: int
    entry: int
    batch: int

    def text(self) -> str:
        return f"{self.ledger}:{self.entry}:{self.batch}"

    @classmethod
    def parse(cls, text: str) -> Position:
        ledger, entry, batch = (int(part) for part in text.split(":")[:3])
        return cls(ledger, entry, batch)


BEFORE_ALL: Final = Position(-1, -1, -1)
"""Before every stored message: the exclusive start of a read from the earliest."""

EARLIEST: Final = "earliest"
LATEST: Final = "latest"

READ_OPTION_NAMES: Final = (
    "serviceUrl",
    "adminUrl",
    "topic",
    "topics",
    "topicsPattern",
    "startingOffsets",
    "endingOffsets",
    "maxRecordsPerTrigger",
    "maxBytesPerTrigger",
    "failOnDataLoss",
    "subscriptionName",
    "pollTimeoutMs",
    "readPath",
    "valueSchema",
)
PRODUCER_OPTION_NAMES: Final = (
    "compressionType",
    "batchingEnabled",
    "batchingMaxMessages",
    "batchingMaxPublishDelayMs",
    "messageRoutingMode",
    "keyColumn",
    "producerName",
)
"""The producer's settings of a write, named as Pulsar's ``ProducerConfigurationData``."""
WRITE_OPTION_NAMES: Final = (*dict.fromkeys(("serviceUrl", "topic", *READ_OPTION_NAMES)),)
"""A write takes every option a read takes, so one set of connection options serves both:
``serviceUrl`` and ``topic`` are used, ``adminUrl`` is checked (http(s)://host:port) and not
needed, the read-only ones (offsets, triggers, ...) are ignored. Spark hands options over
lower-cased."""
SPARK_OWNED: Final = frozenset({"path", "checkpointlocation", "queryname"})
"""Options Spark itself sets on a source or sink (load(path), writeStream's checkpoint)."""

_TOPIC_DOMAIN = re.compile(r"^(persistent|non-persistent)://")


def full_topic_name(name: str) -> str:
    """``t`` -> ``persistent://public/default/t``; ``tenant/ns/t`` -> ``persistent://...``."""
    name = name.strip()
    if not name:
        raise MagnetarSourceError("an empty topic name")
    if _TOPIC_DOMAIN.match(name):
        rest = name.split("://", 1)[1]
        if len(rest.split("/")) != 3 or not all(rest.split("/")):
            raise MagnetarSourceError(f"topic {name!r} is not domain://tenant/namespace/topic")
        return name
    parts = name.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{name}"
    if len(parts) == 3 and all(parts):
        return f"persistent://{name}"
    raise MagnetarSourceError(f"topic {name!r} is neither a short name nor tenant/namespace/topic")


def rest_path(topic: str) -> str:
    """The admin API path of a topic: ``persistent/tenant/ns/topic``."""
    domain, rest = topic.split("://", 1)
    return f"{domain}/{rest}"


@dataclass(frozen=True)
class Selector:
    """What to read: fixed topics, or a pattern over one namespace's topics."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    @property
    def namespace(self) -> str:
        """``persistent://tenant/ns`` of the pattern."""
        assert self.pattern is not None
        domain, rest = self.pattern.split("://", 1)
        tenant, namespace, _ = rest.split("/", 2)
        return f"{domain}://{tenant}/{namespace}"

    def matches(self, topic: str) -> bool:
        assert self.pattern is not None
        return re.fullmatch(self.pattern, topic) is not None


def selector(options: Mapping[str, str]) -> Selector:
    given = [k for k in ("topic", "topics", "topicspattern") if options.get(k)]
    if len(given) != 1:
        raise MagnetarSourceError(
            "exactly one of the options topic, topics, topicsPattern is required"
            + (f" (given: {', '.join(given)})" if given else "")
        )
    if given[0] == "topic":
        return Selector(topics=(full_topic_name(options["topic"]),))
    if given[0] == "topics":
        names = [full_topic_name(t) for t in options["topics"].split(",") if t.strip()]
        if not names:
            raise MagnetarSourceError("option topics names no topic")
        return Selector(topics=tuple(dict.fromkeys(names)))
    raw = options["topicspattern"].strip()
    pattern = raw if _TOPIC_DOMAIN.match(raw) else f"persistent://public/default/{raw}"
    if len(pattern.split("://", 1)[1].split("/")) < 3:
        raise MagnetarSourceError(f"topicsPattern {raw!r} must be tenant/namespace/regex")
    try:
        re.compile(pattern)
    except re.error as err:
        raise MagnetarSourceError(
            f"topicsPattern {raw!r} is not a regular expression: {err}"
        ) from None
    return Selector(pattern=pattern)


OffsetSpec = str | Position
"""``earliest``, ``latest`` or a message id."""


@dataclass(frozen=True)
class OffsetsOption:
    """``startingOffsets`` / ``endingOffsets``: one spec for every partition, or JSON with a
    spec per topic partition (partitions not named take ``default``)."""

    default: str
    per_partition: Mapping[str, OffsetSpec]

    def spec(self, partition: str) -> OffsetSpec:
        return self.per_partition.get(partition, self.default)


def offsets_option(options: Mapping[str, str], name: str, *, default: str) -> OffsetsOption:
    raw = options.get(name.lower(), "").strip()
    label = {"startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets"}[name.lower()]
    if not raw:
        return OffsetsOption(default, {})
    if raw.lower() in (EARLIEST, LATEST):
        return OffsetsOption(raw.lower(), {})
    try:
        parsed = json.loads(raw)
    except ValueError as err:
        raise MagnetarSourceError(
            f"{label} is neither earliest, latest nor JSON of message ids per partition: {err}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise MagnetarSourceError(f'{label} JSON must be an object {{"topic": message id, ...}}')
    per: dict[str, OffsetSpec] = {}
    for topic, value in parsed.items():
        per[full_topic_name(topic)] = _offset_value(label, topic, value)
    return OffsetsOption(default, per)


def _offset_value(label: str, topic: str, value: object) -> OffsetSpec:
    if isinstance(value, str) and value.lower() in (EARLIEST, LATEST):
        return value.lower()
    if isinstance(value, dict):
        unknown = set(value) - {"ledgerId", "entryId", "batchIndex", "partitionIndex"}
        ids = [value.get("ledgerId"), value.get("entryId"), value.get("batchIndex", -1)]
        if not unknown and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            ledger, entry, batch = (int(str(i)) for i in ids)
            if ledger >= 0 and entry >= 0 and batch >= -1:
                return Position(ledger, entry, batch)
    raise MagnetarSourceError(
        f'{label}: the offset of {topic!r} must be "earliest", "latest" or '
        f'{{"ledgerId": int >= 0, "entryId": int >= 0[, "batchIndex": int]}}, not {value!r}'
    )


def positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise MagnetarSourceError(f"option {name} must be a positive integer, not {raw!r}")
    return value


def boolean(options: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise MagnetarSourceError(f"option {name} must be true or false, not {raw!r}")


def check_known(options: Mapping[str, str], names: tuple[str, ...], *, what: str) -> None:
    known = {n.lower() for n in names} | SPARK_OWNED
    unknown = sorted(k for k in options if k.lower() not in known)
    if unknown:
        raise MagnetarSourceError(
            f"unknown option(s) for magnetar {what}: {', '.join(unknown)} "
            f"(known: {', '.join(names)})"
        )
    if options.get("path"):
        raise MagnetarSourceError(
            "magnetar takes no path: name topics with the option topic, topics or topicsPattern"
        )


READ_PATH_PROTOCOL: Final = "protocol"
"""Executors read with the Pulsar protocol themselves (``protocol_read``): the default."""
READ_PATH_CLIENT: Final = "client"
"""Executors read with the official client's Reader (``read.read_range``)."""


def read_path(options: Mapping[str, str]) -> str:
    raw = (options.get("readpath") or "").strip()
    if not raw:
        return READ_PATH_PROTOCOL
    if raw.lower() in (READ_PATH_PROTOCOL, READ_PATH_CLIENT):
        return raw.lower()
    raise MagnetarSourceError(
        f"option readPath must be {READ_PATH_PROTOCOL} or {READ_PATH_CLIENT}, not {raw!r}"
    )


def service_url(options: Mapping[str, str]) -> str:
    url = options.get("serviceurl", "").strip()
    if not url:
        raise MagnetarSourceError(
            "option serviceUrl (pulsar://host:port or pulsar+ssl://host:port) is required"
        )
    try:
        parsed = urls.parse_service_url(url)
    except urls.BadUrlError as exc:
        raise MagnetarSourceError(f"option serviceUrl: {exc}") from None
    if len(parsed.addresses) > 1:
        raise MagnetarSourceError(
            f"option serviceUrl {url!r}: name one host (a proxy or a Service in front of the "
            "brokers); the executors' read path connects to one"
        )
    return url


def admin_url(options: Mapping[str, str], *, required: bool) -> str | None:
    url = options.get("adminurl", "").strip().rstrip("/")
    if not url:
        if required:
            raise MagnetarSourceError("option adminUrl (http(s)://host:port) is required for reads")
        return None
    if not re.match(r"^https?://[^/]+$", url):
        raise MagnetarSourceError(f"option adminUrl must be http(s)://host:port, not {url!r}")
    return url
