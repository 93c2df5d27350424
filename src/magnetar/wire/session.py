"""The client side of one Pulsar connection as a state machine: the handshake, PING/PONG and
AUTH_CHALLENGE, without I/O.

Why this module exists: every client connection in Magnetar -- asyncio
(``magnetar.client.connection``) or blocking (``magnetar.client.blocking``) -- sends CONNECT,
waits for CONNECTED (or an ERROR, or an AUTH_CHALLENGE to answer), and answers the broker's
PINGs for as long as it lives. Written once here, in the manner of h11 and asyncpg's protocol
state machine: the connection hands each received command to ``receive`` and writes what
``outgoing`` holds; what ``receive`` does not take is the caller's (answers to requests,
MESSAGE, SEND_RECEIPT...).

Authentication plugs in here and only here: an ``AuthProvider`` (anything with a ``method``
and ``auth_data()``, as the security package's client credentials have) gives CONNECT its
method and data and answers each AUTH_CHALLENGE (the broker's refresh of expiring
credentials; a ``ChallengeAnswerer`` for a multi-step method such as SASL). No provider is
implemented in this module.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from magnetar.wire import commands, pb

_C = pb.BaseCommand


class AuthProvider(Protocol):
    """Credentials of a client connection (Pulsar's ``Authentication``): the method name
    and data CONNECT carries; an AUTH_CHALLENGE (the broker refreshing expiring credentials)
    is answered with ``auth_data()`` again, read afresh (a rotated token is picked up)."""

    @property
    def method(self) -> str:
        """The method name put in CONNECT (``token``, ``basic``, ``tls``...)."""
        ...

    def auth_data(self) -> bytes:
        """The data CONNECT (and each answer to a challenge) carries."""
        ...


@runtime_checkable
class ChallengeAnswerer(Protocol):
    """A provider whose answer depends on the challenge's data (a multi-step method such as
    SASL); others answer with ``auth_data()``."""

    def answer_challenge(self, data: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class OnBehalfOf:
    """The client a proxy connects for: CONNECT's ``original_principal`` (the role the proxy
    authenticated) and, with Pulsar's ``forwardAuthorizationCredentials``, the client's own
    ``original_auth_method`` / ``original_auth_data``. The broker checks that the connecting
    role is a proxy role and authorizes both (docs/security.md)."""

    principal: str
    auth_method: str | None = None
    auth_data: bytes | None = None

    def apply(self, connect: pb.CommandConnect) -> None:
        """Set the original_* fields of ``connect``."""
        connect.original_principal = self.principal
        if self.auth_method is not None:
            connect.original_auth_method = self.auth_method
        if self.auth_data is not None:
            connect.original_auth_data = self.auth_data.decode("utf-8", "replace")


class HandshakeRefusedError(Exception):
    """The peer refused the connection (an ERROR, or an AUTH_CHALLENGE without credentials):
    ``code`` is its ServerError."""

    def __init__(self, code: pb.ServerError.ValueType, message: str) -> None:
        super().__init__(f"{commands.error_name(code)}: {message}")
        self.code = code
        self.message = message


class State(enum.Enum):
    NEW = 1
    CONNECTING = 2  # CONNECT sent
    CONNECTED = 3
    CLOSED = 4


class ClientSession:
    """One connection's handshake and keepalive answers. ``proxy_to``: the broker a proxy
    must pipe this connection to (CONNECT's ``proxy_to_broker_url``)."""

    def __init__(
        self,
        *,
        client_version: str,
        proxy_to: str | None = None,
        auth: AuthProvider | None = None,
        protocol_version: int = commands.PROTOCOL_VERSION,
        on_behalf_of: OnBehalfOf | None = None,
    ) -> None:
        self.client_version = client_version
        self.proxy_to = proxy_to
        self.auth = auth
        self.on_behalf_of = on_behalf_of
        self.protocol_version = protocol_version
        self.state = State.NEW
        self.outgoing: list[pb.BaseCommand] = []
        self.connected: pb.CommandConnected | None = None

    def connect(self) -> pb.BaseCommand:
        """The CONNECT to send first."""
        if self.state is not State.NEW:
            raise RuntimeError("CONNECT is sent once")
        cmd = commands.connect(
            client_version=self.client_version,
            protocol_version=self.protocol_version,
            auth_method_name=self.auth.method if self.auth is not None else None,
            auth_data=self.auth.auth_data() if self.auth is not None else None,
        )
        if self.proxy_to:
            cmd.connect.proxy_to_broker_url = self.proxy_to
        if self.on_behalf_of is not None:
            self.on_behalf_of.apply(cmd.connect)
        self.state = State.CONNECTING
        return cmd

    @property
    def max_message_size(self) -> int | None:
        """What the broker announced in CONNECTED (None: not announced)."""
        c = self.connected
        return c.max_message_size if c is not None and c.HasField("max_message_size") else None

    def receive(self, cmd: pb.BaseCommand) -> bool:
        """Take ``cmd`` if it is the session's (True; answers are in ``outgoing``); False:
        the caller's. HandshakeRefusedError when the peer refuses the connection."""
        t = cmd.type
        if t == _C.PING:
            self.outgoing.append(commands.pong())
            return True
        if t == _C.PONG:
            return True
        if t == _C.AUTH_CHALLENGE:
            self._challenged(cmd.authChallenge)
            return True
        if self.state is State.CONNECTING:
            if t == _C.CONNECTED:
                self.state = State.CONNECTED
                self.connected = cmd.connected
                return True
            self.state = State.CLOSED
            if t == _C.ERROR:
                raise HandshakeRefusedError(cmd.error.error, cmd.error.message)
            raise HandshakeRefusedError(
                pb.UnknownError, f"CONNECT answered with {commands.type_name(t)}"
            )
        return False

    def _challenged(self, challenge: pb.CommandAuthChallenge) -> None:
        if self.auth is None:
            self.state = State.CLOSED
            raise HandshakeRefusedError(
                pb.AuthenticationError,
                f"the broker asks for authentication ({challenge.challenge.auth_method_name}) "
                "and this connection has no credentials",
            )
        response = pb.BaseCommand(type=_C.AUTH_RESPONSE)
        r = response.authResponse
        r.client_version = self.client_version
        r.protocol_version = self.protocol_version
        r.response.auth_method_name = self.auth.method
        data = challenge.challenge.auth_data
        auth = self.auth
        answer = (
            auth.answer_challenge(data) if isinstance(auth, ChallengeAnswerer) else auth.auth_data()
        )
        r.response.auth_data = answer
        self.outgoing.append(response)

    def take_outgoing(self) -> list[pb.BaseCommand]:
        out, self.outgoing = self.outgoing, []
        return out
