"""Requests a client connection answers from the broker service alone: partitioned topic
metadata, lookup, a namespace's topics, schemas.

Why this module exists: each is one typed command in and one response command out (an
error response when it fails), with nothing of the connection in between -- the session
(:mod:`magnetar.broker.connection`) only sends the answer. Failures are logged with the
client's address: a :class:`BrokerError` (bad input, not found) as info, anything else as a
warning with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from magnetar.broker import schemas
from magnetar.broker.access import TopicOp
from magnetar.broker.contracts import BrokerError
from magnetar.broker.service import BrokerService
from magnetar.wire import commands, pb
from magnetar.wire.errors import WireError
from magnetar.wire.topics import TopicDomain

log = logging.getLogger(__name__)

_DOMAINS_OF_MODE: Final = {
    pb.CommandGetTopicsOfNamespace.PERSISTENT: (TopicDomain.PERSISTENT,),
    pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: (TopicDomain.NON_PERSISTENT,),
    pb.CommandGetTopicsOfNamespace.ALL: (TopicDomain.PERSISTENT, TopicDomain.NON_PERSISTENT),
}


Authorize = Callable[[TopicOp, str], Awaitable[None]]
"""The asking connection's check: raises BrokerError(AuthorizationError) when the operation
on the topic (or, for the topics of a namespace, on ``tenant/namespace``) is not allowed
(:meth:`ServerConnection.authorize`)."""


async def allow_all(op: TopicOp, topic: str) -> None:
    """An :data:`Authorize` for callers that are not clients (in-process tests)."""


def error_of(exc: BaseException) -> tuple[pb.ServerError.ValueType, str]:
    """The ServerError code and message a failure is answered with."""
    if isinstance(exc, BrokerError):
        return exc.code, exc.message  # type: ignore[return-value]
    if isinstance(exc, WireError):
        return exc.server_error, str(exc)
    return pb.UnknownError, f"{type(exc).__name__}: {exc}"


def log_failure(remote: str, what: str, topic: str, exc: BaseException) -> None:
    if isinstance(exc, BrokerError):
        log.info("%s: %s of %r failed: %s", remote, what, topic, exc.message)
    else:
        log.warning("%s: %s of %r failed", remote, what, topic, exc_info=exc)


async def partitioned_metadata(
    service: BrokerService,
    cmd: pb.CommandPartitionedTopicMetadata,
    remote: str,
    authorize: Authorize = allow_all,
) -> pb.BaseCommand:
    rid = cmd.request_id
    try:
        topic = service.parse_topic(cmd.topic)
        await authorize(TopicOp.LOOKUP, cmd.topic)
        partitions = await service.partitioned_metadata(
            topic, auto_create=cmd.metadata_auto_creation_enabled
        )
    except Exception as exc:
        code, message = error_of(exc)
        log_failure(remote, "partitioned metadata", cmd.topic, exc)
        return commands.partitioned_metadata_response(request_id=rid, error=code, message=message)
    return commands.partitioned_metadata_response(request_id=rid, partitions=partitions)


async def lookup(
    service: BrokerService,
    cmd: pb.CommandLookupTopic,
    remote: str,
    authorize: Authorize = allow_all,
) -> pb.BaseCommand:
    rid = cmd.request_id
    try:
        topic = service.parse_topic(cmd.topic)
        await authorize(TopicOp.LOOKUP, cmd.topic)
        answer = await service.lookup(
            topic, authoritative=cmd.authoritative, listener=cmd.advertised_listener_name
        )
    except Exception as exc:
        code, message = error_of(exc)
        log_failure(remote, "lookup", cmd.topic, exc)
        return commands.lookup_response(request_id=rid, error=code, message=message)
    return commands.lookup_response(
        request_id=rid,
        broker_service_url=answer.service_url,
        broker_service_url_tls=answer.service_url_tls or None,
        redirect=answer.redirect,
        authoritative=answer.authoritative,
    )


async def topics_of_namespace(
    service: BrokerService,
    cmd: pb.CommandGetTopicsOfNamespace,
    remote: str,
    authorize: Authorize = allow_all,
) -> pb.BaseCommand:
    rid = cmd.request_id
    try:
        tenant, sep, namespace = cmd.namespace.partition("/")
        if not sep or "/" in namespace:
            raise BrokerError(pb.InvalidTopicName, f"bad namespace name {cmd.namespace!r}")
        # Pulsar: listing a namespace's topics needs produce or consume granted on the
        # namespace (a grant on one topic does not list the others)
        await authorize(TopicOp.LOOKUP, cmd.namespace)
        topics = await service.topics_of_namespace(
            tenant, namespace, domains=_DOMAINS_OF_MODE.get(cmd.mode, (TopicDomain.PERSISTENT,))
        )
    except Exception as exc:
        log_failure(remote, "topics of namespace", cmd.namespace, exc)
        code, message = error_of(exc)
        return commands.error(request_id=rid, error=code, message=message)
    return commands.get_topics_of_namespace_response(request_id=rid, topics=topics)


async def get_schema(
    service: BrokerService, cmd: pb.CommandGetSchema, remote: str, authorize: Authorize = allow_all
) -> pb.BaseCommand:
    rid = cmd.request_id
    try:
        topic = service.parse_topic(cmd.topic)
        await authorize(TopicOp.LOOKUP, cmd.topic)
        version = (
            schemas.decode_version(cmd.schema_version)
            if cmd.HasField("schema_version") and cmd.schema_version
            else None
        )
        stored = await service.schemas.get(topic, version)
    except Exception as exc:
        log_failure(remote, "get schema", cmd.topic, exc)
        code, message = error_of(exc)
        return commands.get_schema_response(request_id=rid, error=code, message=message)
    if stored is None:
        return commands.get_schema_response(
            request_id=rid, error=pb.TopicNotFound, message="Topic not found or no-schema"
        )
    return commands.get_schema_response(
        request_id=rid,
        schema=stored.to_proto(),
        schema_version=schemas.encode_version(stored.version),
    )


async def get_or_create_schema(
    service: BrokerService,
    cmd: pb.CommandGetOrCreateSchema,
    remote: str,
    authorize: Authorize = allow_all,
) -> pb.BaseCommand:
    rid = cmd.request_id
    try:
        topic = service.parse_topic(cmd.topic)
        await authorize(TopicOp.PRODUCE, cmd.topic)
        if not cmd.HasField("schema") or not schemas.is_stored(cmd.schema):
            raise BrokerError(pb.IncompatibleSchema, "no schema to register")
        version = await service.schemas.get_or_create(
            topic, cmd.schema, await service.schema_policy(topic)
        )
    except Exception as exc:
        log_failure(remote, "get or create schema", cmd.topic, exc)
        code, message = error_of(exc)
        return commands.get_or_create_schema_response(request_id=rid, error=code, message=message)
    return commands.get_or_create_schema_response(
        request_id=rid, schema_version=schemas.encode_version(version)
    )
