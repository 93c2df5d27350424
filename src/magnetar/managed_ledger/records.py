"""What a managed ledger and its cursors keep in the metadata store, and how it is encoded.

Why this module exists: the owning broker writes these records, the next owner (after a
crash or a hand-over) and the admin tools read them; the JSON shapes are documented in
docs/metadata.md and must not drift from the code. Pure functions and frozen values only,
no I/O: the impl modules do the compare-and-set.

* :class:`ManagedLedgerInfo` — the ordered ledger list (per-ledger entries, size, close
  timestamp, reserved offload state), the terminated position and properties.
* :class:`CursorPointer` — where a durable cursor's state lives: its cursor ledger, the
  mark-delete position at the last pointer update (fallback when the ledger is unreadable),
  the last entry of the ledger when it was closed, and the cursor's properties.
* :func:`parse_name` — ``tenant/namespace/domain/topic`` onto the key layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from magnetar.managed_ledger.api import Position
from magnetar.metadata import keys

FORMAT = 1


@dataclass(frozen=True, slots=True)
class TopicPath:
    """A managed ledger's name split into its key-layout parts."""

    tenant: str
    namespace: str
    domain: keys.Domain
    topic: str

    @property
    def name(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.domain}/{self.topic}"

    @property
    def info_key(self) -> str:
        return keys.managed_ledger(self.tenant, self.namespace, self.domain, self.topic)

    @property
    def cursors_key(self) -> str:
        return keys.cursors(self.tenant, self.namespace, self.domain, self.topic)

    def cursor_key(self, cursor: str) -> str:
        return keys.cursor(self.tenant, self.namespace, self.domain, self.topic, cursor)


def parse_name(name: str) -> TopicPath:
    """``tenant/namespace/domain/topic`` (the topic part may itself contain ``/``);
    ``domain://tenant/namespace/topic`` is accepted too. Raises ValueError."""
    if "://" in name:
        domain, _, rest = name.partition("://")
        parts = rest.split("/", 2)
        if len(parts) == 3:
            name = f"{parts[0]}/{parts[1]}/{domain}/{parts[2]}"
    parts = name.split("/", 3)
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"managed ledger name must be tenant/namespace/domain/topic: {name!r}")
    tenant, namespace, domain, topic = parts
    if domain not in keys.DOMAINS:
        raise ValueError(f"managed ledger domain must be one of {keys.DOMAINS}: {name!r}")
    return TopicPath(tenant, namespace, domain, topic)


def domain_prefix(prefix: str) -> tuple[str, str]:
    """(store key, name prefix) of ``tenant/namespace/domain`` for listing managed ledgers."""
    parts = prefix.strip("/").split("/")
    if len(parts) != 3 or not all(parts) or parts[2] not in keys.DOMAINS:
        raise ValueError(f"prefix must be tenant/namespace/domain: {prefix!r}")
    tenant, namespace, domain = parts
    key = f"{keys.MANAGED_LEDGERS}/{keys.segment(tenant)}/{keys.segment(namespace)}/{domain}"
    return key, f"{tenant}/{namespace}/{domain}"


def _pos_json(p: Position) -> dict[str, int]:
    return {"ledgerId": p.ledger_id, "entryId": p.entry_id}


def _pos_from(doc: Mapping[str, Any]) -> Position:
    return Position(int(doc["ledgerId"]), int(doc["entryId"]))


# --- managed-ledger info --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """One ledger of the list. ``entries``/``size``/``timestamp_ms`` are final once the
    ledger is closed; the last ledger of an owned managed ledger is open (all zero)."""

    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp_ms: int = 0
    offloaded: Mapping[str, Any] | None = None
    """Reserved for the offloader: ``uuid``, ``driver``, ``complete``, ``bookieDeleted``."""


@dataclass(frozen=True, slots=True)
class ManagedLedgerInfo:
    ledgers: tuple[LedgerRecord, ...] = ()
    terminated_position: Position | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    def with_ledgers(self, ledgers: tuple[LedgerRecord, ...]) -> ManagedLedgerInfo:
        return replace(self, ledgers=ledgers)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "ledgers": [
                {
                    "ledgerId": r.ledger_id,
                    "entries": r.entries,
                    "size": r.size,
                    "timestamp": r.timestamp_ms,
                    "offloaded": dict(r.offloaded) if r.offloaded is not None else None,
                }
                for r in self.ledgers
            ],
            "terminatedPosition": (
                _pos_json(self.terminated_position) if self.terminated_position else None
            ),
            "properties": dict(self.properties),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ManagedLedgerInfo:
        doc = json.loads(raw)
        terminated = doc.get("terminatedPosition")
        return cls(
            ledgers=tuple(
                LedgerRecord(
                    ledger_id=int(r["ledgerId"]),
                    entries=int(r.get("entries", 0)),
                    size=int(r.get("size", 0)),
                    timestamp_ms=int(r.get("timestamp", 0)),
                    offloaded=r.get("offloaded"),
                )
                for r in doc.get("ledgers", [])
            ),
            terminated_position=_pos_from(terminated) if terminated else None,
            properties={str(k): str(v) for k, v in doc.get("properties", {}).items()},
        )


# --- cursor pointer -------------------------------------------------------------------------

NO_LEDGER = -1


@dataclass(frozen=True, slots=True)
class CursorPointer:
    cursor_ledger_id: int
    """The ledger holding the cursor's state entries, NO_LEDGER before the first persist."""
    mark_delete: Position
    """The mark-delete position when the pointer was last written (a lower bound of the
    cursor ledger's latest state: using it alone may redeliver, never skip)."""
    last_entry_id: int = -1
    """Last entry of the cursor ledger when this pointer was written at a close, else -1."""
    last_active_ms: int = 0
    properties: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc = {
            "format": FORMAT,
            "cursorLedgerId": self.cursor_ledger_id,
            "markDeletePosition": _pos_json(self.mark_delete),
            "lastEntryId": self.last_entry_id,
            "lastActive": self.last_active_ms,
            "properties": dict(self.properties),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CursorPointer:
        doc = json.loads(raw)
        return cls(
            cursor_ledger_id=int(doc.get("cursorLedgerId", NO_LEDGER)),
            mark_delete=_pos_from(doc["markDeletePosition"]),
            last_entry_id=int(doc.get("lastEntryId", -1)),
            last_active_ms=int(doc.get("lastActive", 0)),
            properties={str(k): int(v) for k, v in doc.get("properties", {}).items()},
        )
