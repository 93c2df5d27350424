"""The client side of a connection's handshake, PING/PONG and AUTH_CHALLENGE, without
sockets."""

from __future__ import annotations

import dataclasses

import pytest

from magnetar.wire import commands, pb, session


@dataclasses.dataclass
class _Token:
    """Credentials that change on every challenge (as a refreshed token does)."""

    method: str = "token"
    refreshed: int = 0

    def initial_data(self) -> bytes:
        return b"token-0"

    def challenge(self, data: bytes) -> bytes:
        self.refreshed += 1
        return b"token-%d-for-" % self.refreshed + data


def test_connect_then_connected_then_ping_answered() -> None:
    s = session.ClientSession(client_version="c", proxy_to="pulsar://b:6650")
    connect = s.connect().connect
    assert (connect.client_version, connect.protocol_version) == ("c", commands.PROTOCOL_VERSION)
    assert connect.proxy_to_broker_url == "pulsar://b:6650"
    assert not connect.HasField("auth_method_name")
    assert s.receive(
        commands.connected(server_version="m", protocol_version=21, max_message_size=9)
    )
    assert (s.state, s.max_message_size) == (session.State.CONNECTED, 9)
    assert s.receive(commands.ping())
    assert [c.type for c in s.take_outgoing()] == [pb.BaseCommand.PONG]
    assert not s.receive(commands.success(1))  # the caller's


def test_an_error_refuses_the_handshake() -> None:
    s = session.ClientSession(client_version="c")
    s.connect()
    with pytest.raises(session.HandshakeRefusedError, match="AuthenticationError: bad token"):
        s.receive(commands.error(request_id=0, error=pb.AuthenticationError, message="bad token"))
    assert s.state is session.State.CLOSED


def test_credentials_go_in_connect_and_answer_each_challenge() -> None:
    auth = _Token()
    s = session.ClientSession(client_version="c", auth=auth)
    connect = s.connect().connect
    assert (connect.auth_method_name, connect.auth_data) == ("token", b"token-0")
    challenge = commands.auth_challenge(
        server_version="m", protocol_version=21, method="token", data=b"refresh"
    )
    assert s.receive(challenge)
    (answer,) = s.take_outgoing()
    assert answer.type == pb.BaseCommand.AUTH_RESPONSE
    r = answer.authResponse.response
    assert (r.auth_method_name, r.auth_data) == ("token", b"token-1-for-refresh")
    assert s.state is session.State.CONNECTING  # CONNECTED still to come


def test_a_challenge_without_credentials_is_refused_clearly() -> None:
    s = session.ClientSession(client_version="c")
    s.connect()
    challenge = commands.auth_challenge(
        server_version="m", protocol_version=21, method="token", data=b""
    )
    with pytest.raises(session.HandshakeRefusedError, match="no credentials"):
        s.receive(challenge)
