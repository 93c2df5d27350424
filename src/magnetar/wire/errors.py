"""Errors the codec raises, named by how the connection layer must react.

Every decoding problem surfaces as one of these (never a bare ``struct.error`` or
``DecodeError``), so a connection can map it to a protocol answer in one place: each class
names the ``ServerError`` code to send and says whether the byte stream is still framed
(``fatal`` False: answer and carry on) or lost (``fatal`` True: close the connection).
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.errors import PermanentError
from magnetar.wire import pb


class WireError(PermanentError):
    """Base of every error the codec raises on bad input."""

    #: ServerError code to report to the peer, when a report is possible at all.
    server_error: ClassVar[pb.ServerError.ValueType] = pb.UnknownError
    #: True when the byte stream can no longer be framed: the connection must be closed.
    fatal: ClassVar[bool] = True


class FrameTooLargeError(WireError):
    """A frame announced a size above the configured limit (detected from its first bytes)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class CorruptFrameError(WireError):
    """The frame's sizes are inconsistent or its command cannot be decoded."""


class UnknownCommandError(WireError):
    """A well-framed command whose type this codec does not know.

    The stream is still in sync (the frame was skipped), so the connection may answer and
    keep reading.
    """

    fatal = False

    def __init__(self, command_type: int | None) -> None:
        super().__init__(f"unknown command type {command_type}")
        self.command_type = command_type


class CorruptMetadataError(WireError):
    """A MessageMetadata, SingleMessageMetadata or BrokerEntryMetadata cannot be decoded."""

    fatal = False


class CorruptBatchError(WireError):
    """A batched payload does not split into the messages its metadata announces."""

    fatal = False


class UnsupportedCompressionError(WireError):
    """A payload uses a compression codec that is not available here."""

    server_error = pb.NotAllowedError
    fatal = False


class InvalidTopicNameError(WireError):
    """A topic name that Pulsar's naming rules reject."""

    server_error = pb.InvalidTopicName
    fatal = False


class CompressedPayloadError(WireError):
    """A compressed payload was asked to be split without permission to decompress it."""

    fatal = False
