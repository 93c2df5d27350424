"""A bare Pulsar-protocol client over magnetar.wire, for what the official Python client does
not expose (priority levels, ACTIVE_CONSUMER_CHANGE events)."""

from __future__ import annotations

import socket
import time

from magnetar.wire import commands, frames, pb


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = frames.FrameDecoder()
        self.frames: list[frames.Frame] = []
        self._rid = 100
        self.send(commands.connect())
        self.wait_for(lambda f: f.type == pb.BaseCommand.CONNECTED)

    def send(self, cmd: pb.BaseCommand) -> None:
        self.sock.sendall(frames.encode_command(cmd))

    def request_id(self) -> int:
        self._rid += 1
        return self._rid

    def pump(self, timeout: float = 0.2) -> None:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return
        for f in self.decoder.feed(data):
            if f.type == pb.BaseCommand.PING:
                self.send(commands.pong())
            else:
                self.frames.append(f)

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
        self.send(commands.lookup(topic=topic, request_id=self.request_id()))
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
        self.send(cmd)
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

    def close(self) -> None:
        self.sock.close()
