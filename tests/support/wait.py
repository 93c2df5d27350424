"""Waiting for a condition in tests: poll it with a bounded timeout, never sleep a fixed time.

Why this module exists: a fixed ``sleep`` that waits for a state change is either too short on
a loaded machine (a flaky test) or too long on a quiet one (a slow suite). Every test waits
through one of these two helpers instead:

* :func:`wait_until` (blocking code): calls ``predicate`` until it returns a truthy value and
  returns that value;
* :func:`eventually` (inside an event loop): the same, and ``predicate`` may return an
  awaitable (a coroutine function is fine).

Both raise ``AssertionError`` naming ``what`` and the last exception seen after ``timeout``
seconds. An exception of a type in ``retry_on`` (``AssertionError`` by default) counts as "not
yet"; any other exception propagates at once.

A check that something does *not* happen watches it for a stated window instead
(:func:`holds_for`, :func:`holds_for_async`): the window is the claim, not a guess at how long
a change takes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_INTERVAL_S = 0.05


class _Deadline:
    """The bounded wait of one call: its end, and the last "not yet" exception seen."""

    def __init__(self, timeout: float, what: str, predicate: object) -> None:
        self.end = time.monotonic() + timeout
        self.timeout, self.what, self.predicate = timeout, what, predicate
        self.last: BaseException | None = None

    def check(self) -> None:
        """Fail once the time is up, naming what was waited for."""
        if time.monotonic() > self.end:
            tail = f" (last: {self.last!r})" if self.last is not None else ""
            what = self.what or self.predicate
            raise AssertionError(f"timed out after {self.timeout}s waiting for {what}{tail}")


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = DEFAULT_INTERVAL_S,
    what: str = "",
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """Call ``predicate`` until it returns a truthy value (returned); at most ``timeout`` s."""
    deadline = _Deadline(timeout, what, predicate)
    while True:
        try:
            if value := predicate():
                return value
        except retry_on as err:
            deadline.last = err
        deadline.check()
        time.sleep(interval)


async def eventually(
    predicate: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = DEFAULT_INTERVAL_S,
    what: str = "",
    retry_on: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """:func:`wait_until` for code inside an event loop; ``predicate`` may be async."""
    deadline = _Deadline(timeout, what, predicate)
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value  # type: ignore[return-value]
        except retry_on as err:
            deadline.last = err
        deadline.check()
        await asyncio.sleep(interval)


def holds_for(
    predicate: Callable[[], object],
    seconds: float,
    *,
    interval: float = DEFAULT_INTERVAL_S,
    what: str = "",
) -> None:
    """Check ``predicate`` stays true for ``seconds`` (a negative check: that something does
    *not* happen, e.g. a retained ledger is not trimmed); fails at its first false answer."""
    deadline = time.monotonic() + seconds
    while True:
        assert predicate(), f"no longer true: {what or predicate}"
        if time.monotonic() > deadline:
            return
        time.sleep(interval)


async def holds_for_async(
    predicate: Callable[[], object],
    seconds: float,
    *,
    interval: float = DEFAULT_INTERVAL_S,
    what: str = "",
) -> None:
    """:func:`holds_for` inside an event loop; ``predicate`` may be async."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        assert value, f"no longer true: {what or predicate}"
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(interval)
