"""Which backlog quota applies (magnetar.broker.backlog_quota.resolve): type by type, the
topic's own over the namespace's over the broker's defaults, with Pulsar's limit rules."""

from __future__ import annotations

from magnetar.broker.backlog_quota import Quota, Quotas, resolve
from magnetar.broker.config import BrokerConfig


def _q(size: int = -1, age: int = -1, policy: str = "producer_exception") -> dict[str, object]:
    return {"limit": size, "limitSize": size, "limitTime": age, "policy": policy}


def test_defaults_mean_no_quota() -> None:
    assert resolve({}, BrokerConfig()) == Quotas(None, None)
    assert not resolve({}, BrokerConfig()).any


def test_topic_overrides_namespace_type_by_type() -> None:
    effective = {
        "backlog_quota_map": {
            "destination_storage": _q(size=1000),
            "message_age": _q(age=60, policy="consumer_backlog_eviction"),
        },
        "backLogQuotaMap": {"destination_storage": _q(size=10, policy="producer_request_hold")},
    }
    assert resolve(effective, BrokerConfig()) == Quotas(
        size=Quota(10, "producer_request_hold"), time=Quota(60, "consumer_backlog_eviction")
    )


def test_broker_defaults_fill_what_is_not_set() -> None:
    config = BrokerConfig(
        backlog_quota_default_limit_bytes=4096,
        backlog_quota_default_limit_s=30,
        backlog_quota_default_policy="producer_exception",
    )
    effective = {"backlog_quota_map": {"message_age": _q(age=5)}}
    assert resolve(effective, config) == Quotas(
        size=Quota(4096, "producer_exception"), time=Quota(5, "producer_exception")
    )
    # a positive limit in GiB wins over the one in bytes (Pulsar's BacklogQuotaManager)
    gb = BrokerConfig(backlog_quota_default_limit_gb=0.5, backlog_quota_default_limit_bytes=1)
    assert resolve({}, gb).size == Quota(512 << 20, "producer_request_hold")


def test_limit_rules_as_pulsar() -> None:
    # a size limit of 0 is a limit (any backlog, even none, is at it); -1 is none
    assert resolve({"backlog_quota_map": {"destination_storage": _q(size=0)}}, BrokerConfig()).size
    assert (
        resolve({"backlog_quota_map": {"destination_storage": _q(size=-1)}}, BrokerConfig()).size
        is None
    )
    # an age limit must be positive
    assert resolve({"backlog_quota_map": {"message_age": _q(age=0)}}, BrokerConfig()).time is None
