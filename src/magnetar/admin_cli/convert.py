"""Argument conversions of ``magnetar admin``, as pulsar-admin spells them: relative times
(``10m``), sizes (``10G``), topic and namespace names, message ids (``LEDGER:ENTRY``)."""

from __future__ import annotations

import argparse
import re
import urllib.parse
from typing import Final

from magnetar.admin_cli.client import AdminCliError

_UNITS_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_UNITS_B: Final = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
DOMAINS: Final = ("persistent", "non-persistent")


def seconds(text: str) -> int:
    """``30s``, ``10m``, ``2h``, ``1d``, ``1w``, ``-1`` (infinite), or plain seconds."""
    m = re.fullmatch(r"(-?\d+)([smhdw]?)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a time: {text!r} (e.g. 30s, 10m, 2h, 1d, -1)")
    value, unit = int(m.group(1)), m.group(2) or "s"
    return value if value < 0 else value * _UNITS_S[unit]


def size_bytes(text: str) -> int:
    """``500k``, ``100M``, ``10G``, ``1T``, ``-1`` (infinite), or plain bytes."""
    m = re.fullmatch(r"(-?\d+)([kmgt]?)b?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 100M, 10G, -1)")
    value, unit = int(m.group(1)), m.group(2)
    return value if value < 0 or not unit else value * _UNITS_B[unit]


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive(text: str) -> int:
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def topic_parts(name: str) -> tuple[str, str, str, str]:
    """(domain, tenant, namespace, local name) of ``persistent://t/ns/topic``, ``t/ns/topic``
    or ``topic`` (in public/default), as pulsar-admin resolves short names."""
    domain = "persistent"
    rest = name
    if "://" in name:
        domain, _, rest = name.partition("://")
    parts = rest.split("/")
    if len(parts) == 1:
        parts = ["public", "default", parts[0]]
    if len(parts) != 3 or not all(parts) or domain not in DOMAINS:
        raise AdminCliError(
            f"invalid topic name {name!r}: use [persistent://|non-persistent://]tenant/ns/topic", 2
        )
    return domain, parts[0], parts[1], parts[2]


def topic_path(name: str) -> str:
    """``persistent://t/ns/topic`` -> ``persistent/t/ns/topic`` (each part URL-quoted)."""
    domain, tenant, ns, local = topic_parts(name)
    return "/".join([domain, _quote(tenant), _quote(ns), _quote(local)])


def namespace_path(name: str) -> str:
    """``tenant/namespace`` -> the same, URL-quoted; AdminCliError when malformed."""
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        raise AdminCliError(f"invalid namespace {name!r}: use tenant/namespace", 2)
    return "/".join(_quote(p) for p in parts)


def path_part(value: str, what: str) -> str:
    """Any non-empty value (a role, a subscription) as one URL path segment."""
    if not value:
        raise AdminCliError(f"empty {what}", 2)
    return _quote(value)


def name_path(name: str, what: str) -> str:
    """A tenant or cluster name as one URL path segment."""
    if not name or "/" in name:
        raise AdminCliError(f"invalid {what} name {name!r}", 2)
    return _quote(name)


def message_id(text: str) -> dict[str, int]:
    """``LEDGER:ENTRY``, ``earliest`` or ``latest`` as Pulsar's MessageId JSON."""
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    if text == "latest":
        return {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}
    m = re.fullmatch(r"(-?\d+):(-?\d+)(?::(-?\d+))?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid message id {text!r}: use LEDGER:ENTRY, earliest or latest"
        )
    mid = {"ledgerId": int(m.group(1)), "entryId": int(m.group(2))}
    if m.group(3) is not None:
        mid["partitionIndex"] = int(m.group(3))
    return mid
