"""Routes: a topic's subscriptions (list, create at a message id, delete, skip, clear the
backlog, expire messages, reset by time or message id, replicated or not)."""

from __future__ import annotations

from aiohttp import web

from magnetar.broker.admin import validation
from magnetar.broker.admin.common import accepts, parsed
from magnetar.broker.admin.topic_routes import paths
from magnetar.broker.topic_ops import subscriptions


async def list_subscriptions(request: web.Request) -> web.Response:
    """The topic's subscriptions."""
    topic = await paths.topic(request)
    return web.json_response(await subscriptions.list_subscriptions(paths.scope(request), topic))


@accepts(validation.MESSAGE_ID, required=False)
async def create_subscription(request: web.Request) -> web.Response:
    """Create a durable subscription at a message id (earliest: -1:-1; latest by default)."""
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    await subscriptions.create(paths.scope(request), topic, name, start=parsed(request))
    return paths.no_content()


async def delete_subscription(request: web.Request) -> web.Response:
    """Delete a subscription (412 while it has consumers, unless force)."""
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    await subscriptions.delete(paths.scope(request), topic, name, force=paths.force(request))
    return paths.no_content()


async def reset_by_time(request: web.Request) -> web.Response:
    """Reset the subscription to the first message published at or after the timestamp (ms)."""
    timestamp = validation.timestamp(request.match_info["timestamp"])
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    await subscriptions.reset_to_time(paths.scope(request), topic, name, publish_time_ms=timestamp)
    return paths.no_content()


@accepts(validation.MESSAGE_ID)
async def reset_by_message_id(request: web.Request) -> web.Response:
    """Reset the subscription to a message id."""
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    await subscriptions.reset_to_message_id(
        paths.scope(request), topic, name, message_id=parsed(request)
    )
    return paths.no_content()


async def skip(request: web.Request) -> web.Response:
    """Skip the next n messages of the subscription."""
    n = validation.path_integer(request.match_info["n"], "number of messages", minimum=0)
    topic = await paths.topic(request)
    await subscriptions.skip(paths.scope(request), topic, request.match_info["subscription"], n)
    return paths.no_content()


async def skip_all(request: web.Request) -> web.Response:
    """Clear the subscription's backlog."""
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    await subscriptions.clear_backlog(paths.scope(request), topic, name)
    return paths.no_content()


def _seconds(request: web.Request) -> int:
    return validation.path_integer(request.match_info["seconds"], "expire time", minimum=0)


async def expire_messages(request: web.Request) -> web.Response:
    """Expire (acknowledge) the subscription's messages older than the given seconds."""
    seconds = _seconds(request)
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    await subscriptions.expire(paths.scope(request), topic, name, older_than_s=seconds)
    return paths.no_content()


async def expire_all_subscriptions(request: web.Request) -> web.Response:
    """Expire the messages older than the given seconds on every subscription."""
    seconds = _seconds(request)
    topic = await paths.topic(request)
    await subscriptions.expire(paths.scope(request), topic, None, older_than_s=seconds)
    return paths.no_content()


async def get_replicated_status(request: web.Request) -> web.Response:
    """Whether the subscription is replicated, by topic (each partition)."""
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    status = await subscriptions.replicated_status(paths.scope(request), topic, name)
    return web.json_response(status)


@accepts(validation.BOOLEAN)
async def set_replicated_status(request: web.Request) -> web.Response:
    """Make the subscription replicated (true) or not (false) (docs/geo-replication.md)."""
    topic = await paths.topic(request)
    name = request.match_info["subscription"]
    await subscriptions.set_replicated(
        paths.scope(request), topic, name, enabled=bool(parsed(request))
    )
    return paths.no_content()


def register(router: web.UrlDispatcher) -> None:
    t, s = paths.TOPIC, paths.SUBSCRIPTION
    router.add_get(f"{t}/subscriptions", list_subscriptions)
    router.add_post(t + "/all_subscription/expireMessages/{seconds}", expire_all_subscriptions)
    router.add_put(s, create_subscription)
    router.add_delete(s, delete_subscription)
    router.add_post(s + "/skip/{n}", skip)
    router.add_post(f"{s}/skip_all", skip_all)
    router.add_post(s + "/expireMessages/{seconds}", expire_messages)
    router.add_post(s + "/resetcursor/{timestamp}", reset_by_time)
    router.add_post(f"{s}/resetcursor", reset_by_message_id)
    router.add_get(f"{s}/replicatedSubscriptionStatus", get_replicated_status)
    router.add_post(f"{s}/replicatedSubscriptionStatus", set_replicated_status)
