"""Small asyncio helpers: the event loop Magnetar runs on."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

from magnetar.common import watchdog

T = TypeVar("T")


def settle(fut: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    """Complete ``fut`` with ``error``, else with ``result``, unless it is done already: a
    callback-style outcome (``functools.partial(settle, fut)``) into a future."""
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(cast(T, result))


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop when it is installed (it is a dependency), else asyncio's loop;
    with ``MAGNETAR_LOOP_WATCHDOG_MS`` set, watched (:mod:`magnetar.common.watchdog`)."""
    threshold = os.environ.get(watchdog.ENV, "").strip()
    if threshold:
        try:
            seconds = float(threshold) / 1000
        except ValueError:
            why = f"{watchdog.ENV}={threshold!r}: not a number of milliseconds"
            raise SystemExit(why) from None
        main = _watched(main, seconds)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.run(main)
    result: T = uvloop.run(main)
    return result


async def _watched(main: Coroutine[Any, Any, T], threshold: float) -> T:
    dog = watchdog.LoopWatchdog(asyncio.get_running_loop(), threshold).start()
    try:
        return await main
    finally:
        dog.stop()


# Collector thresholds for long-running servers. The default (700, 10, 10) runs a young
# collection every 700 container allocations; a broker allocates a handful per message
# (futures, callbacks, positions), so at 20k msg/s the collector ran ~150 times a second
# and took about a third of the event loop (bench/peers W2: 17k -> 24k msg/s). Cycles are
# still collected, just in larger batches.
SERVER_GC_THRESHOLDS = (50_000, 50, 100)


def tune_gc_for_server() -> None:
    """Call once startup is done: collect, move what survived (modules, config, the
    service's long-lived objects) out of the collector's sight, and raise the thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVER_GC_THRESHOLDS)


async def wait_for_signal() -> None:
    """Return on SIGTERM or SIGINT (the servers' main loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
