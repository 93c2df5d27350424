"""A watchdog for the event loop: what kept it from running callbacks, and for how long.

Every Magnetar server runs on one event loop, so anything that holds it (a blocking system
call, a long Python loop, a C call that keeps the GIL) delays every connection at once: the
latency tails of the side-by-side benchmarks (docs/benchmarks.md). With
``MAGNETAR_LOOP_WATCHDOG_MS=N`` in the environment, :func:`magnetar.common.aio.run` starts a
thread that posts a callback to the loop, waits for it while sampling the loop thread's Python
stack every millisecond, and logs a WARNING for every wait longer than N ms: its length and
the stack seen most often meanwhile (where the loop was held). A stack that ends in the loop's
own ``run`` means the loop thread was in C code: waiting for the GIL another thread held, or
not scheduled by the kernel. Off by default: the sampling costs CPU.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger(__name__)

ENV = "MAGNETAR_LOOP_WATCHDOG_MS"
FRAMES = 12
"""Innermost frames kept per sample."""


@dataclass(frozen=True, slots=True)
class Stall:
    seconds: float
    stack: tuple[str, ...]
    """The loop thread's innermost frames seen most often during the stall, outermost first
    (empty when no sample was taken)."""
    samples: int


def _stack(frame: FrameType) -> tuple[str, ...]:
    summary = traceback.extract_stack(frame)[-FRAMES:]
    return tuple(f"{f.name} ({_short(f.filename)}:{f.lineno})" for f in summary)


def _short(path: str) -> str:
    for cut in ("site-packages/", "/src/"):
        if cut in path:
            return path.split(cut, 1)[1]
    return path


class LoopWatchdog:
    """Reports each time ``loop`` could not run a callback for ``threshold`` seconds."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        threshold: float,
        report: Callable[[Stall], None] | None = None,
    ) -> None:
        self._loop = loop
        self._threshold = threshold
        self._report = report or _log_stall
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loop-watchdog", daemon=True)

    def start(self) -> LoopWatchdog:
        """Call from the loop's thread."""
        self._loop_thread = threading.get_ident()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            answered = threading.Event()
            started = time.perf_counter()
            try:
                self._loop.call_soon_threadsafe(answered.set)
            except RuntimeError:  # the loop is closed
                return
            seen: collections.Counter[tuple[str, ...]] = collections.Counter()
            while not answered.wait(0.001):
                if self._stop.is_set():
                    return
                frame = sys._current_frames().get(self._loop_thread)
                if frame is not None:
                    seen[_stack(frame)] += 1
            waited = time.perf_counter() - started
            if waited > self._threshold:
                stack, _ = seen.most_common(1)[0] if seen else ((), 0)
                self._report(Stall(waited, stack, sum(seen.values())))
            self._stop.wait(0.002)


def _log_stall(stall: Stall) -> None:
    where = "\n    ".join(stall.stack) if stall.stack else "(no sample)"
    log.warning(
        "event loop held for %.1f ms; its thread was most often in (%d samples):\n    %s",
        stall.seconds * 1000,
        stall.samples,
        where,
    )
