"""How ``magnetar admin`` shows answers: readable text by default, JSON with ``--output json``.

Text layout, whatever the endpoint:

* a list of names prints one per line (so ``... | xargs`` works);
* a list of objects prints as a table, one row each;
* an object prints as aligned ``key  value`` lines, nested objects flattened to dotted keys
  (``retention_policies.retentionTimeInMinutes``); then, under a heading, each field that is a
  list of objects (``publishers``, ``ledgers``) or a map of objects (``subscriptions``,
  ``cursors``) as a table whose first column is the map's key. Tables too wide for a terminal
  print one indented block per row instead;
* stored messages (``topics peek-messages``, ``examine-message``, ``get-message-by-id``)
  print as pulsar-admin prints them: the message id, the metadata, then the payload as a
  hex dump with its printable characters (JSON: the metadata and the base64 payload).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from magnetar.admin_cli.client import Message

MAX_TABLE_WIDTH: Final = 140
MAX_COLUMNS: Final = 9


def render(value: Any, output: str = "text") -> str:
    if isinstance(value, list) and value and all(isinstance(v, Message) for v in value):
        if output == "json":
            return json.dumps([m.to_json() for m in value], indent=2)
        return "\n\n".join(message(m) for m in value)
    if output == "json":
        return json.dumps(value, indent=2)
    if value is None:
        return ""
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return table(value)
        return "\n".join(cell(v) for v in value)
    if isinstance(value, dict):
        return document(value)
    return cell(value)


def message(m: Message) -> str:
    """One stored message: id, metadata lines, then a hex dump of the payload."""
    lines = [f"Message ID: {m.message_id}"]
    width = max((len(k) for k in m.metadata), default=0)
    lines += [f"{k.ljust(width)}  {v}" for k, v in sorted(m.metadata.items())]
    lines.append(hexdump(m.payload))
    return "\n".join(lines)


def hexdump(data: bytes, per_line: int = 16) -> str:
    """``offset  hex bytes  |printable|``, 16 bytes a line."""
    out = []
    for at in range(0, len(data), per_line):
        chunk = data[at : at + per_line]
        hexes = " ".join(f"{b:02x}" for b in chunk).ljust(per_line * 3 - 1)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        out.append(f"{at:08x}  {hexes}  |{text}|")
    return "\n".join(out) if out else "(empty payload)"


def cell(value: Any) -> str:
    """One value in a table cell or after a key."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value == value else "NaN"
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return str(len(value))  # e.g. a subscription's consumers: how many
        return ",".join(cell(v) for v in value) if value else "[]"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":")) if value else "{}"
    return str(value)


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _is_keyed_rows(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(v, dict) for v in value.values())
        and any(v for v in value.values())
    )


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys for nested objects (lists and tables are left to the caller)."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict) and item and not _is_keyed_rows(item):
            out.update(flatten(item, name + "."))
        else:
            out[name] = item
    return out


def document(value: Mapping[str, Any]) -> str:
    """An object: key/value lines, then a titled table per list or map of objects."""
    pairs: list[tuple[str, str]] = []
    sections: list[str] = []
    for key, item in flatten(value).items():
        if _is_rows(item):
            sections.append(f"{key}:\n{_indent(table(item))}")
        elif _is_keyed_rows(item):
            rows = [{"name": name, **(row or {})} for name, row in item.items()]
            sections.append(f"{key}:\n{_indent(table(rows))}")
        else:
            pairs.append((key, cell(item)))
    width = max((len(k) for k, _ in pairs), default=0)
    lines = [f"{k:<{width}}  {v}" for k, v in pairs]
    return "\n\n".join(part for part in ["\n".join(lines), *sections] if part)


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as an aligned table with an upper-case header (columns: every key, in order of
    first appearance); one block per row when that would be too wide."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    if len(columns) > MAX_COLUMNS or sum(widths) + 2 * len(widths) > MAX_TABLE_WIDTH:
        return "\n\n".join(_block(columns, r) for r in cells)
    header = "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in [header, *body])


def _block(columns: list[str], values: list[str]) -> str:
    width = max(len(c) for c in columns)
    first, *rest = zip(columns, values, strict=True)
    lines = [f"{first[0]}: {first[1]}"]
    lines += [f"  {c:<{width}}  {v}" for c, v in rest]
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" if line else line for line in text.splitlines())
