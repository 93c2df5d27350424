"""The lookup's redirect state machine, without sockets: redirect chains, a proxy's answer,
Failed answers, and a loop of redirects cut at the limit."""

from __future__ import annotations

import pytest

from magnetar.wire import commands, lookup, pb, urls


def _redirect(
    url: str, *, authoritative: bool = True, tls_url: str | None = None
) -> pb.BaseCommand:
    return commands.lookup_response(
        request_id=1,
        broker_service_url=url,
        broker_service_url_tls=tls_url,
        redirect=True,
        authoritative=authoritative,
    )


def _connect(url: str, *, proxy: bool = False) -> pb.BaseCommand:
    return commands.lookup_response(
        request_id=1, broker_service_url=url, authoritative=True, proxy_through_service_url=proxy
    )


def test_the_first_step_asks_the_service_url_not_authoritatively() -> None:
    chain = lookup.Redirects()
    assert chain.step == lookup.Ask(lookup.SERVICE, authoritative=False)
    ask = chain.request(topic="persistent://t/n/x", request_id=4).lookupTopic
    assert (ask.topic, ask.request_id, ask.authoritative) == ("persistent://t/n/x", 4, False)


def test_a_redirect_chain_ends_at_the_owner() -> None:
    chain = lookup.Redirects()
    step = chain.answer(_redirect("pulsar://b1:6650", authoritative=False))
    assert step == lookup.Ask(lookup.Target("pulsar://b1:6650"), authoritative=False)
    step = chain.answer(_redirect("pulsar://b2:6650"))
    assert step == lookup.Ask(lookup.Target("pulsar://b2:6650"), authoritative=True)
    assert chain.request(topic="t", request_id=2).lookupTopic.authoritative
    assert chain.answer(_connect("pulsar://b2:6650")) == lookup.Found(
        lookup.Target("pulsar://b2:6650")
    )
    assert chain.redirects == 2
    with pytest.raises(RuntimeError, match="the owner was found"):
        chain.request(topic="t", request_id=3)


def test_a_proxy_answer_goes_through_the_service_url() -> None:
    chain = lookup.Redirects()
    found = chain.answer(_connect("pulsar://b1:6650", proxy=True))
    assert found == lookup.Found(lookup.Target(None, proxy_to="pulsar://b1:6650"))
    assert isinstance(found, lookup.Found)
    assert found.target.broker == "pulsar://b1:6650"
    service = urls.parse_service_url("pulsar://proxy:6650")
    assert lookup.address_of(found.target, service) == (
        urls.Address("proxy", 6650),
        "pulsar://b1:6650",
    )
    direct = lookup.Target("pulsar://b1:7000")
    assert lookup.address_of(direct, service) == (urls.Address("b1", 7000), None)


def test_a_redirect_loop_is_cut_at_max_hops() -> None:
    chain = lookup.Redirects(max_redirects=3)
    for hop in range(3):
        chain.answer(_redirect(f"pulsar://b{hop % 2}:6650"))
    with pytest.raises(lookup.TooManyRedirectsError, match="more than 3 lookup redirects") as e:
        chain.answer(_redirect("pulsar://b1:6650"))
    assert e.value.code == pb.ServiceNotReady


def test_failed_answers_and_errors_name_the_broker_code() -> None:
    with pytest.raises(lookup.LookupFailedError, match="TopicNotFound: no such topic") as e:
        lookup.Redirects().answer(
            commands.lookup_response(request_id=1, error=pb.TopicNotFound, message="no such topic")
        )
    assert e.value.code == pb.TopicNotFound
    with pytest.raises(lookup.LookupFailedError, match="ServiceNotReady: loading") as e:
        lookup.Redirects().answer(
            commands.error(request_id=1, error=pb.ServiceNotReady, message="loading")
        )
    with pytest.raises(lookup.LookupFailedError, match="LOOKUP answered with SUCCESS"):
        lookup.Redirects().answer(commands.success(1))


def test_tls_follows_the_tls_urls_and_refuses_an_answer_without_one() -> None:
    chain = lookup.Redirects(tls=True)
    step = chain.answer(_redirect("pulsar://b1:6650", tls_url="pulsar+ssl://b1:6651"))
    assert step == lookup.Ask(lookup.Target("pulsar+ssl://b1:6651"), authoritative=True)
    with pytest.raises(lookup.LookupFailedError, match="no brokerServiceUrlTls"):
        chain.answer(_connect("pulsar://b1:6650"))
