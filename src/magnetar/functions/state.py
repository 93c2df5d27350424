"""Function state in the metadata store, without BookKeeper's table service.

Each key of a function's state is one record (``keys.function_state_key``). Its value is a
type byte and the data: ``0x00`` + bytes for ``put_state``, ``0x01`` + a signed 64-bit
big-endian number for a counter (the table service's encoding of numbers, so ``get_state`` of
a counter answers its eight bytes as Pulsar does). ``incr`` is a compare-and-set loop on the
record's version, so concurrent instances never lose an increment.

:func:`to_json` / :func:`from_json` are Pulsar's ``FunctionState``
(``key``, ``stringValue``, ``byteValue`` (base64), ``numberValue``, ``version``) as the admin
API's querystate/putstate speak it.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any, Final

from magnetar.functions.config import FunctionName
from magnetar.metadata import api, keys

BYTES: Final = b"\x00"
NUMBER: Final = b"\x01"
MAX_CAS_ATTEMPTS: Final = 100
MAX_KEY_CHARS: Final = 1024


class StateConflict(Exception):
    """A put with an expected version found another one."""


@dataclass(frozen=True, slots=True)
class Value:
    key: str
    data: bytes
    number: int | None
    """The counter's value when the key holds a counter."""
    version: int


def check_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_CHARS:
        raise ValueError(f"state key must be 1..{MAX_KEY_CHARS} characters, got {key!r}")
    return key


def encode_number(number: int) -> bytes:
    return NUMBER + struct.pack(">q", number)


def decode(key: str, raw: bytes, version: int) -> Value:
    if raw[:1] == NUMBER and len(raw) == 9:
        (number,) = struct.unpack(">q", raw[1:])
        return Value(key, raw[1:], number, version)
    return Value(key, raw[1:], None, version)


def _key(name: FunctionName, key: str) -> str:
    return keys.function_state_key(name.tenant, name.namespace, name.name, check_key(key))


async def get(store: api.MetadataStore, name: FunctionName, key: str) -> Value | None:
    record = await store.get(_key(name, key))
    return None if record is None else decode(key, record.value, record.version)


async def put(
    store: api.MetadataStore,
    name: FunctionName,
    key: str,
    *,
    data: bytes | None = None,
    number: int | None = None,
    expected_version: int | None = None,
) -> int:
    """Store bytes (``put_state``) or a number; ``expected_version`` makes it a
    compare-and-set (0: only when absent). The new version; StateConflict when it moved."""
    raw = encode_number(number) if number is not None else BYTES + (data or b"")
    expected = None if expected_version is None else api.Version(expected_version)
    try:
        return int(await store.put(_key(name, key), raw, expected_version=expected))
    except api.BadVersionError as err:
        raise StateConflict(f"state key {key!r} is not at version {expected_version}") from err


async def incr(store: api.MetadataStore, name: FunctionName, key: str, amount: int) -> int:
    """Add ``amount`` to the counter (absent: 0); the new value."""
    full = _key(name, key)
    for _ in range(MAX_CAS_ATTEMPTS):
        record = await store.get(full)
        current = 0
        expected = api.NOT_EXISTS
        if record is not None:
            value = decode(key, record.value, record.version)
            if value.number is None:
                raise ValueError(f"state key {key!r} holds bytes, not a counter")
            current, expected = value.number, record.version
        try:
            await store.put(full, encode_number(current + amount), expected_version=expected)
        except api.BadVersionError:
            continue
        return current + amount
    raise api.StoreUnavailableError(f"counter {key!r}: changed concurrently too often")


async def delete(store: api.MetadataStore, name: FunctionName, key: str) -> bool:
    """Delete the key; False when it was not there."""
    try:
        await store.delete(_key(name, key))
    except api.NotFoundError:
        return False
    return True


def to_json(value: Value) -> dict[str, Any]:
    """Pulsar's FunctionState: a counter as ``numberValue``, UTF-8 text as ``stringValue``,
    other bytes as ``byteValue`` (base64, as Jackson writes ``byte[]``)."""
    out: dict[str, Any] = {"key": value.key}
    if value.number is not None:
        out["numberValue"] = value.number
    else:
        try:
            out["stringValue"] = value.data.decode("utf-8")
        except UnicodeDecodeError:
            out["byteValue"] = base64.b64encode(value.data).decode()
    out["version"] = value.version
    return out


def from_json(key: str, body: Any) -> tuple[bytes | None, int | None, int | None]:
    """(bytes, number, expected version) from a FunctionState; ValueError naming the
    problem. Exactly one of stringValue, byteValue, numberValue must be given."""
    if not isinstance(body, dict):
        raise ValueError("state must be a FunctionState JSON object")
    given_key = body.get("key")
    if given_key is not None and given_key != key:
        raise ValueError(f"state key {given_key!r} does not match the URL's {key!r}")
    values = [k for k in ("stringValue", "byteValue", "numberValue") if body.get(k) is not None]
    if len(values) != 1:
        raise ValueError("give exactly one of stringValue, byteValue, numberValue")
    version = body.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValueError(f"version must be an integer, got {version!r}")
    kind = values[0]
    value = body[kind]
    if kind == "stringValue":
        if not isinstance(value, str):
            raise ValueError("stringValue must be a string")
        return value.encode(), None, version
    if kind == "byteValue":
        if not isinstance(value, str):
            raise ValueError("byteValue must be base64 text")
        try:
            return base64.b64decode(value, validate=True), None, version
        except ValueError:
            raise ValueError("byteValue is not valid base64") from None
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise ValueError("numberValue must be a 64-bit integer")
    return None, value, version
