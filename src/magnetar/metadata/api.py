"""The metadata-store contract every backend implements, and its errors.

Why this module exists: bookies, brokers and the operator's helpers need one vocabulary for
versioned keys, compare-and-set, watches and leased (ephemeral) keys, whichever store sits
behind it. Both backends (``etcd`` and ``embedded``) pass one contract test suite.

Versions
    Every stored key carries a ``Version``: the store-wide revision at which it was last
    modified (etcd's ``mod_revision``). Versions only grow and are never reused, so a
    compare-and-set cannot be fooled by a key that was deleted and created again.
    ``NOT_EXISTS`` (0) as an expected version means "create only".

Keys and values
    Keys are absolute, ``/``-separated paths: they start with ``/``, have no empty segment,
    no trailing ``/`` and no NUL; at most ``MAX_KEY_BYTES`` bytes of UTF-8. Values are bytes,
    at most ``MAX_VALUE_BYTES``. Violations raise :class:`InvalidKeyError`,
    :class:`KeyTooLargeError` or :class:`ValueTooLargeError` before anything is sent.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import NewType, Protocol, runtime_checkable

from magnetar.common import errors

Version = NewType("Version", int)
"""Store-wide revision at which a key was last modified; 0 = the key does not exist."""

NOT_EXISTS = Version(0)
"""Expected version meaning "the key must not exist" (create-only)."""

MAX_KEY_BYTES = 4096
MAX_VALUE_BYTES = 1024 * 1024
DEFAULT_PAGE_SIZE = 1000
MAX_TXN_OPS = 128
"""Most compares, and most operations per branch, in one transaction (etcd's default)."""
MAX_TXN_BYTES = 1_400_000
"""Most bytes of keys and values in one transaction branch (etcd refuses requests over
1.5 MiB; this leaves room for the encoding). A single maximal put always fits."""


# --- errors -----------------------------------------------------------------------------------


class MetadataError(errors.MagnetarError):
    """Base of every metadata-store error."""


class InvalidKeyError(MetadataError, errors.PermanentError, ValueError):
    """The key is empty, relative, has an empty segment, a trailing '/' or a NUL."""


class KeyTooLargeError(MetadataError, errors.PermanentError, ValueError):
    """The key is longer than MAX_KEY_BYTES bytes of UTF-8."""


class ValueTooLargeError(MetadataError, errors.PermanentError, ValueError):
    """The value is larger than MAX_VALUE_BYTES."""


class InvalidTxnError(MetadataError, errors.PermanentError, ValueError):
    """A transaction is malformed: more than MAX_TXN_OPS compares or operations in a branch,
    or one key written twice in the same branch."""


class BadVersionError(MetadataError, errors.PermanentError):
    """A compare-and-set lost: the key's version is not the expected one.

    ``actual`` is the version found (``NOT_EXISTS`` when the key is absent), when known.
    """

    def __init__(self, key: str, expected: Version, actual: Version | None = None) -> None:
        super().__init__(f"{key}: expected version {expected}, found {actual}")
        self.key = key
        self.expected = expected
        self.actual = actual


class NotFoundError(MetadataError, errors.PermanentError, KeyError):
    """An operation that needs the key found none."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"{self.key}: not found"


class SessionLostError(MetadataError, errors.PermanentError):
    """The session (lease) expired or was revoked: its ephemeral keys are gone."""


class WatchCompactedError(MetadataError, errors.PermanentError):
    """A watch cannot resume: the history it needs was compacted away.

    The watcher must re-read the current state (``get``/``scan``) and watch again from
    ``compact_revision``. Raised instead of silently skipping events.
    """

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"history compacted up to revision {compact_revision}")
        self.compact_revision = compact_revision


class StoreUnavailableError(MetadataError, errors.TemporaryError):
    """The store could not be reached (within the operation's deadline). Retry later."""


class StoreClosedError(MetadataError, errors.PermanentError):
    """The store object was closed."""


# --- values -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """A key's value and version as read from the store."""

    key: str
    value: bytes
    version: Version
    create_revision: int
    session_id: int | None = None
    """Lease id of the session owning the key when ephemeral, else None."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a prefix scan: records sorted by key, and where to continue."""

    records: list[Record]
    more: bool
    """True when keys after the last record remain; pass its key as ``start_after``."""


class EventType(enum.Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: EventType
    key: str
    value: bytes
    """The new value for PUT; empty for DELETE."""
    revision: int
    """Store revision of the change (the new version for PUT)."""


# Transactions: all compares hold -> all success ops applied atomically, else the failure ops.


@dataclass(frozen=True, slots=True)
class Compare:
    """Holds when ``key``'s version equals ``version`` (NOT_EXISTS for an absent key)."""

    key: str
    version: Version


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    session: Session | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    key: str


Op = Put | Delete


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    versions: dict[str, Version]
    """For each key written by the branch taken: its new version."""


async def scan_pages(
    scan: Callable[..., Awaitable[Page]], prefix: str, page_size: int
) -> AsyncIterator[Record]:
    """Every record below ``prefix``, fetched page by page with a store's ``scan``."""
    start_after: str | None = None
    while True:
        page = await scan(prefix, start_after=start_after, limit=page_size)
        for record in page.records:
            yield record
        if not page.more or not page.records:
            return
        start_after = page.records[-1].key


# --- sessions ---------------------------------------------------------------------------------


@runtime_checkable
class Session(Protocol):
    """A lease kept alive by the store client; ephemeral keys die with it.

    When the session is lost (lease expired while the store was unreachable, or revoked),
    ``lost`` becomes true and every callback given to ``on_lost`` is called once. A lost
    session never comes back: open a new one.
    """

    @property
    def id(self) -> int: ...

    @property
    def ttl(self) -> float: ...

    @property
    def lost(self) -> bool: ...

    def on_lost(self, callback: Callable[[], None]) -> None: ...

    async def close(self) -> None:
        """Revoke the lease: its keys disappear now."""


# --- the store --------------------------------------------------------------------------------


@runtime_checkable
class MetadataStore(Protocol):
    """Async metadata store. Every method may raise StoreUnavailableError (temporary)."""

    async def get(self, key: str) -> Record | None:
        """The key's record, or None when absent."""

    async def put(
        self,
        key: str,
        value: bytes,
        *,
        expected_version: Version | None = None,
        session: Session | None = None,
    ) -> Version:
        """Write ``value``; return the new version.

        ``expected_version``: None = unconditional, NOT_EXISTS = create only, else the
        version the key must have. Raises BadVersionError when it does not hold.
        ``session``: make the key ephemeral, deleted when the session ends.
        """

    async def delete(self, key: str, *, expected_version: Version | None = None) -> None:
        """Delete the key. Raises NotFoundError when absent and BadVersionError when
        ``expected_version`` is given and does not match."""

    async def delete_prefix(self, prefix: str) -> int:
        """Delete ``prefix`` itself and every key below ``prefix + '/'``; return the count."""

    async def scan(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> Page:
        """Records of the keys strictly below ``prefix + '/'`` (any depth), sorted by key,
        at most ``limit``, starting after key ``start_after``."""

    def scan_all(self, prefix: str, *, page_size: int = DEFAULT_PAGE_SIZE) -> AsyncIterator[Record]:
        """Every record below ``prefix``, fetched page by page."""

    async def children(self, parent: str) -> list[str]:
        """Sorted names of the immediate children of ``parent`` (a child exists when any key
        at or below ``parent/child`` exists)."""

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        """Atomic multi-key transaction."""

    def watch(
        self,
        key: str,
        *,
        prefix: bool = False,
        start_revision: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Every change of ``key`` (or of keys strictly below ``key + '/'`` when ``prefix``)
        in revision order, starting after the store's revision at the time the watch is set
        up, or at ``start_revision`` inclusive. The set-up moment differs by backend (the
        embedded store registers at this call, etcd when first iterated): to miss nothing,
        read ``revision()`` (or a record) first and pass ``start_revision=rev + 1``.

        Survives reconnects without losing or repeating events; raises WatchCompactedError
        when the needed history is gone. Ends when the iterator is closed (aclose) or the
        store closed.
        """

    async def session(self, ttl: float) -> Session:
        """Open a session (lease) of ``ttl`` seconds, kept alive in the background."""

    async def next_id(self, name: str) -> int:
        """A unique, increasing positive 64-bit id from the counter ``name``."""

    async def revision(self) -> int:
        """The store's current revision."""

    async def compact(self, revision: int) -> None:
        """Drop the change history before ``revision``: watches starting earlier then raise
        WatchCompactedError. Keys and their versions are unaffected. (Operations tool; the
        embedded store also compacts on its own to keep a bounded history.)"""

    async def close(self) -> None:
        """Stop keep-alives, close watches and connections. Sessions are not revoked:
        their keys expire with their TTL (a crash behaves the same)."""


# --- validation shared by the backends ---------------------------------------------------------


def check_key(key: str) -> bytes:
    """Validate ``key`` and return it as UTF-8 bytes."""
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"key must be a non-empty string, got {key!r}")
    if not key.startswith("/"):
        raise InvalidKeyError(f"key must be absolute (start with '/'): {key!r}")
    if key != "/" and key.endswith("/"):
        raise InvalidKeyError(f"key must not end with '/': {key!r}")
    if "//" in key:
        raise InvalidKeyError(f"key has an empty segment: {key!r}")
    if "\x00" in key:
        raise InvalidKeyError(f"key contains NUL: {key!r}")
    raw = key.encode()
    if len(raw) > MAX_KEY_BYTES:
        raise KeyTooLargeError(f"key is {len(raw)} bytes, the limit is {MAX_KEY_BYTES}")
    return raw


def check_value(key: str, value: bytes) -> None:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"{key}: value must be bytes, got {type(value).__name__}")
    if len(value) > MAX_VALUE_BYTES:
        raise ValueTooLargeError(
            f"{key}: value is {len(value)} bytes, the limit is {MAX_VALUE_BYTES}"
        )


def check_prefix(prefix: str) -> str:
    """Validate a scan/watch prefix; return it with a trailing '/' (root gives '/')."""
    if prefix == "/":
        return "/"
    check_key(prefix)
    return prefix + "/"


def check_limit(limit: int) -> None:
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")


def check_txn(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> None:
    """Validate a transaction: keys, values, sizes, no key written twice in one branch."""
    if len(compares) > MAX_TXN_OPS:
        raise InvalidTxnError(f"{len(compares)} compares, the limit is {MAX_TXN_OPS}")
    for compare in compares:
        check_key(compare.key)
    for name, branch in (("success", success), ("failure", failure)):
        if len(branch) > MAX_TXN_OPS:
            raise InvalidTxnError(f"{len(branch)} {name} operations, the limit is {MAX_TXN_OPS}")
        seen: set[str] = set()
        size = 0
        for op in branch:
            size += len(check_key(op.key))
            if isinstance(op, Put):
                check_value(op.key, op.value)
                size += len(op.value)
            elif not isinstance(op, Delete):
                raise TypeError(f"not a transaction operation: {op!r}")
            if op.key in seen:
                raise InvalidTxnError(f"{op.key}: written twice in the {name} branch")
            seen.add(op.key)
        if size > MAX_TXN_BYTES:
            raise ValueTooLargeError(
                f"the {name} branch writes {size} bytes, the limit is {MAX_TXN_BYTES}"
            )
