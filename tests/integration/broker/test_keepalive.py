"""Keepalive both ways: the broker answers PING with PONG, pings a silent client, and closes
a client that does not answer; a handshake never completed is closed too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.wire import commands, pb
from tests.integration.broker.test_bad_input import RawClient
from tests.support.standalone import StandaloneProc

INTERVAL = 1.0


@pytest.fixture(scope="module")
def fast_keepalive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    data: Path = tmp_path_factory.mktemp("keepalive") / "data"
    proc = StandaloneProc(data, extra_args=["--keepalive-interval", str(INTERVAL)]).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_silent_client_is_pinged_then_closed(fast_keepalive: StandaloneProc) -> None:
    raw = RawClient(fast_keepalive.port)
    try:
        raw.handshake()
        start = time.monotonic()
        assert raw.read(timeout=INTERVAL * 3).type == pb.BaseCommand.PING
        assert raw.closed_by_peer(timeout=INTERVAL * 4)
        assert time.monotonic() - start >= INTERVAL
    finally:
        raw.close()


def test_client_answering_pings_stays_connected(fast_keepalive: StandaloneProc) -> None:
    raw = RawClient(fast_keepalive.port)
    try:
        raw.handshake()
        deadline = time.monotonic() + INTERVAL * 4
        pings = 0
        while time.monotonic() < deadline:
            try:
                frame = raw.read(timeout=0.5)
            except AssertionError as err:
                assert "timeout" in str(err)  # no frame now; still connected
                continue
            if frame.type == pb.BaseCommand.PING:
                pings += 1
                raw.command(commands.pong())
        assert pings >= 1
        raw.command(commands.ping())
        assert raw.read().type == pb.BaseCommand.PONG
    finally:
        raw.close()


def test_handshake_never_completed_is_closed(fast_keepalive: StandaloneProc) -> None:
    raw = RawClient(fast_keepalive.port)
    try:
        assert raw.closed_by_peer(timeout=INTERVAL * 4)
    finally:
        raw.close()
