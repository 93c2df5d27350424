"""A Pulsar protocol client for tests that look at the exact commands the broker sends (fields
the official clients hide) or send what no official client would: the client layer's
blocking connection (``magnetar.client.blocking``) opened without the handshake, with every
frame handed over as it comes (PINGs included)."""

from __future__ import annotations

import time

from magnetar.client import blocking
from magnetar.client.connection import ConnectionLostError
from magnetar.wire import commands, frames, pb, urls
from tests.support.procs import LOOPBACK


class RawClient:
    """A client speaking frames by hand."""

    def __init__(self, port: int, *, protocol_version: int = commands.PROTOCOL_VERSION) -> None:
        self.conn = blocking.BlockingConnection(
            urls.Address(LOOPBACK, port),
            deadline=time.monotonic() + 5,
            client_version="raw-test",
            protocol_version=protocol_version,
            handshake=False,
        )
        self.sock = self.conn.sock

    def send(self, data: bytes) -> None:
        self.conn.write(data)

    def command(self, cmd: pb.BaseCommand) -> None:
        self.conn.send(cmd)

    def read(self, timeout: float = 5.0) -> frames.Frame:
        """The next frame; AssertionError on EOF or timeout."""
        try:
            frame = self.conn.read(time.monotonic() + timeout)
        except ConnectionLostError as exc:
            raise AssertionError(f"connection closed: {exc}") from None
        assert frame is not None, "no frame before the timeout"
        return frame  # type: ignore[return-value]

    def handshake(self) -> pb.CommandConnected:
        return self.conn.handshake(time.monotonic() + 5)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """Read (discarding frames) until EOF; False if still open after ``timeout``."""
        deadline = time.monotonic() + timeout
        try:
            while self.conn.read(deadline) is not None:
                pass
        except ConnectionLostError:
            return True
        return False

    def close(self) -> None:
        self.conn.close()

    def request(self, cmd: pb.BaseCommand, timeout: float = 10.0) -> frames.Frame:
        """Send ``cmd`` and return the next frame that is not a PING (answered)."""
        self.command(cmd)
        while True:
            frame = self.read(timeout)
            if frame.type != pb.BaseCommand.PING:
                return frame
            self.command(commands.pong())


class FrameLog(RawClient):
    """A raw client through the handshake that keeps the frames it reads (PINGs answered)
    for tests to pick from: what the official Python client does not expose (priority levels,
    ACTIVE_CONSUMER_CHANGE events)."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.handshake()
        self.frames: list[frames.Frame] = []
        self._rid = 100

    def request_id(self) -> int:
        self._rid += 1
        return self._rid

    def pump(self, timeout: float = 0.2) -> None:
        """Keep the frames that come within ``timeout`` (and those right behind them)."""
        deadline = time.monotonic() + timeout
        while (frame := self.conn.next(deadline)) is not None:
            self.frames.append(frame)  # type: ignore[arg-type]
            deadline = min(deadline, time.monotonic() + 0.01)

    def wait_for(self, pred, timeout: float = 5.0) -> frames.Frame:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while True:
            for i, f in enumerate(self.frames):
                if pred(f):
                    return self.frames.pop(i)
            if time.monotonic() > deadline:
                raise TimeoutError("no matching frame")
            self.pump()

    def subscribe(
        self,
        topic: str,
        sub: str,
        consumer_id: int,
        *,
        sub_type: int = pb.CommandSubscribe.Failover,
        name: str,
        priority: int = 0,
    ) -> pb.BaseCommand:
        self.command(commands.lookup(topic=topic, request_id=self.request_id()))
        self.wait_for(lambda f: f.type == pb.BaseCommand.LOOKUP_RESPONSE)
        cmd = commands.subscribe(
            topic=topic,
            subscription=sub,
            consumer_id=consumer_id,
            request_id=self.request_id(),
            sub_type=sub_type,  # type: ignore[arg-type]
            consumer_name=name,
            initial_position=pb.CommandSubscribe.Earliest,
        )
        cmd.subscribe.priority_level = priority
        self.command(cmd)
        return self.wait_for(
            lambda f: f.type in (pb.BaseCommand.SUCCESS, pb.BaseCommand.ERROR)
        ).command

    def active_events(self) -> list[tuple[int, bool]]:
        self.pump()
        out = []
        keep = []
        for f in self.frames:
            if f.type == pb.BaseCommand.ACTIVE_CONSUMER_CHANGE:
                e = f.command.active_consumer_change
                out.append((e.consumer_id, e.is_active))
            else:
                keep.append(f)
        self.frames = keep
        return out

    def messages(self, consumer_id: int) -> list[frames.Frame]:
        self.pump()
        out = [
            f
            for f in self.frames
            if f.type == pb.BaseCommand.MESSAGE and f.command.message.consumer_id == consumer_id
        ]
        self.frames = [f for f in self.frames if f not in out]
        return out
