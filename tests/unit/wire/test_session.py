"""The client side of a connection's handshake, PING/PONG and AUTH_CHALLENGE, without
sockets."""

from __future__ import annotations

import dataclasses

import pytest

from magnetar.wire import commands, pb, session


@dataclasses.dataclass
class _Token:
    """A token read afresh at every use (as a rotated token file is)."""

    method: str = "token"
    reads: int = 0

    def auth_data(self) -> bytes:
        self.reads += 1
        return b"token-%d" % self.reads


@dataclasses.dataclass
class _Sasl:
    """A method whose answer depends on the challenge."""

    method: str = "sasl"

    def auth_data(self) -> bytes:
        return b"hello"

    def answer_challenge(self, data: bytes) -> bytes:
        return b"answer-to-" + data


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
    s = session.ClientSession(client_version="c", auth=_Token())
    connect = s.connect().connect
    assert (connect.auth_method_name, connect.auth_data) == ("token", b"token-1")
    challenge = commands.auth_challenge(
        server_version="m", protocol_version=21, method="token", data=b"refresh"
    )
    assert s.receive(challenge)
    (answer,) = s.take_outgoing()
    assert answer.type == pb.BaseCommand.AUTH_RESPONSE
    r = answer.authResponse.response
    assert (r.auth_method_name, r.auth_data) == ("token", b"token-2")  # read afresh
    assert s.state is session.State.CONNECTING  # CONNECTED still to come


def test_a_multi_step_method_answers_with_the_challenge() -> None:
    s = session.ClientSession(client_version="c", auth=_Sasl())
    assert s.connect().connect.auth_data == b"hello"
    s.receive(
        commands.auth_challenge(server_version="m", protocol_version=21, method="sasl", data=b"x")
    )
    (answer,) = s.take_outgoing()
    assert answer.authResponse.response.auth_data == b"answer-to-x"


def test_a_challenge_without_credentials_is_refused_clearly() -> None:
    s = session.ClientSession(client_version="c")
    s.connect()
    challenge = commands.auth_challenge(
        server_version="m", protocol_version=21, method="token", data=b""
    )
    with pytest.raises(session.HandshakeRefusedError, match="no credentials"):
        s.receive(challenge)


def test_a_proxys_connect_names_the_client() -> None:
    who = session.OnBehalfOf("app", auth_method="token", auth_data=b"jwt")
    connect = session.ClientSession(client_version="p", on_behalf_of=who).connect().connect
    assert (connect.original_principal, connect.original_auth_method) == ("app", "token")
    assert connect.original_auth_data == "jwt"
    plain = session.ClientSession(client_version="p").connect().connect
    assert not plain.HasField("original_principal")
