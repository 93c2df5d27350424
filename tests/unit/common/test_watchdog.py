"""The event-loop watchdog (magnetar.common.watchdog): a callback that holds the loop is
reported with its length and where the loop's thread was; a loop that keeps up is not."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import pytest

from magnetar.common import aio, watchdog


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)


async def test_a_held_loop_is_reported_with_where_it_was_held() -> None:
    stalls: list[watchdog.Stall] = []
    dog = watchdog.LoopWatchdog(asyncio.get_running_loop(), 0.02, stalls.append).start()
    try:
        await asyncio.sleep(0.1)  # the loop keeps up: nothing to report
        assert stalls == []
        hold_the_loop(0.15)
        await asyncio.sleep(0.05)
    finally:
        dog.stop()
    assert len(stalls) == 1
    stall = stalls[0]
    assert 0.12 < stall.seconds < 1.0
    assert stall.samples > 10
    assert any(frame.startswith("hold_the_loop (") for frame in stall.stack)


def test_the_environment_turns_it_on_and_the_stall_is_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(watchdog.ENV, "20")

    async def main() -> int:
        await asyncio.sleep(0.05)
        hold_the_loop(0.1)
        await asyncio.sleep(0.05)
        return 7

    with caplog.at_level(logging.WARNING, logger=watchdog.__name__):
        assert aio.run(main()) == 7
    [record] = [r for r in caplog.records if r.name == watchdog.__name__]
    assert "event loop held for" in record.getMessage()
    assert "hold_the_loop" in record.getMessage()


def test_a_bad_threshold_is_refused_naming_the_variable() -> None:
    code = "from magnetar.common import aio\nimport asyncio\naio.run(asyncio.sleep(0))"
    res = subprocess.run(
        [sys.executable, "-c", code],
        env={"MAGNETAR_LOOP_WATCHDOG_MS": "ten", "PATH": ""},
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 1
    assert "MAGNETAR_LOOP_WATCHDOG_MS='ten': not a number of milliseconds" in res.stderr
