"""Test helpers: commands of every type with their required fields filled."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from magnetar.wire import commands, pb


def fill_required(msg: Message, seed: int = 1) -> Message:
    """Set every required field (recursively) to a deterministic dummy value."""
    for field in msg.DESCRIPTOR.fields:
        if not field.is_required:
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            fill_required(getattr(msg, field.name), seed)
            getattr(msg, field.name).SetInParent()
        elif field.type == FieldDescriptor.TYPE_ENUM:
            setattr(msg, field.name, field.enum_type.values[-1].number)
        elif field.type == FieldDescriptor.TYPE_STRING:
            setattr(msg, field.name, f"{field.name}-{seed}")
        elif field.type == FieldDescriptor.TYPE_BYTES:
            setattr(msg, field.name, f"{field.name}-{seed}".encode())
        elif field.type == FieldDescriptor.TYPE_BOOL:
            setattr(msg, field.name, True)
        else:
            setattr(msg, field.name, seed + field.number)
    return msg


def command_of_type(command_type: int, seed: int = 1) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=command_type)  # type: ignore[arg-type]
    body = getattr(cmd, commands.FIELD_BY_TYPE[command_type])
    body.SetInParent()
    fill_required(body, seed)
    # a few optional fields too, so round trips compare something beyond the required ones
    for field in body.DESCRIPTOR.fields:
        if (
            not field.is_required
            and not field.is_repeated
            and field.type
            in (
                FieldDescriptor.TYPE_UINT64,
                FieldDescriptor.TYPE_UINT32,
            )
        ):
            setattr(body, field.name, seed * 7 + field.number)
    return cmd


def metadata(seq: int = 1, **fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="producer-1",
        sequence_id=seq,
        publish_time=1_700_000_000_000 + seq,
        **fields,  # type: ignore[arg-type]
    )
