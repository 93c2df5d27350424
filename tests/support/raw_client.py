"""A Pulsar protocol client written by hand on a plain socket, for tests that look at the
exact commands the broker sends (fields the official clients hide) or send what no official
client would."""

from __future__ import annotations

import socket
import time

from magnetar.wire import commands, frames, pb
from tests.support.procs import LOOPBACK


class RawClient:
    """A client speaking frames by hand on a plain socket."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((LOOPBACK, port), timeout=5)
        self.decoder = frames.FrameDecoder(max_frame_size=64 * 1024 * 1024)
        self.eof = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def command(self, cmd: pb.BaseCommand) -> None:
        self.send(frames.encode_command(cmd))

    def read(self, timeout: float = 5.0) -> frames.Frame:
        """The next frame; AssertionError on EOF or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            assert not self.eof, "connection closed"
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise AssertionError("no frame before the timeout") from None
            if not data:
                self.eof = True
            else:
                self.decoder.push(data)

    def handshake(self) -> pb.CommandConnected:
        self.command(commands.connect(client_version="raw-test", protocol_version=20))
        frame = self.read()
        assert frame.type == pb.BaseCommand.CONNECTED
        return frame.command.connected

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """Read (discarding frames) until EOF; False if still open after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
            if not data:
                return True
        return False

    def close(self) -> None:
        self.sock.close()

    def request(self, cmd: pb.BaseCommand, timeout: float = 10.0) -> frames.Frame:
        """Send ``cmd`` and return the next frame that is not a PING (answered)."""
        self.command(cmd)
        while True:
            frame = self.read(timeout)
            if frame.type == pb.BaseCommand.PING:
                self.command(commands.pong())
                continue
            return frame
