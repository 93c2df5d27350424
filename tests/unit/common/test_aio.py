"""``aio.settle``: a callback-style outcome into a future, once."""

from __future__ import annotations

import asyncio
import functools

import pytest

from magnetar.common import aio


async def test_settle_gives_the_result_or_the_error_and_only_once() -> None:
    loop = asyncio.get_running_loop()
    ok: asyncio.Future[int] = loop.create_future()
    done = functools.partial(aio.settle, ok)
    done(7, None)
    done(8, None)  # a second outcome is ignored
    done(None, RuntimeError("late"))
    assert await ok == 7

    failed: asyncio.Future[int] = loop.create_future()
    aio.settle(failed, None, ValueError("no"))
    with pytest.raises(ValueError, match="no"):
        await failed

    cancelled: asyncio.Future[int] = loop.create_future()
    cancelled.cancel()
    aio.settle(cancelled, 1, None)  # a cancelled future stays cancelled
    assert cancelled.cancelled()
