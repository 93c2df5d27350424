"""Service and broker URLs: what is accepted, and bad URLs refused with a message naming the
URL and the problem."""

from __future__ import annotations

import pytest

from magnetar.wire import urls
from magnetar.wire.urls import Address


def test_service_url_one_host() -> None:
    s = urls.parse_service_url("pulsar://broker-0:6650")
    assert (s.tls, s.addresses) == (False, (Address("broker-0", 6650),))


def test_service_url_several_hosts_default_ports_and_trailing_slash() -> None:
    s = urls.parse_service_url("pulsar://a:6650,b,[::1]:7000/")
    assert s.addresses == (Address("a", 6650), Address("b", 6650), Address("::1", 7000))
    assert str(s.addresses[2]) == "[::1]:7000"


def test_tls_service_url_defaults_to_6651() -> None:
    s = urls.parse_service_url("pulsar+ssl://secure")
    assert (s.tls, s.first) == (True, Address("secure", 6651))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("broker:6650", "expected pulsar://host:port"),
        ("http://broker:8080", "the scheme must be pulsar:// or pulsar+ssl://, not http://"),
        ("pulsar://", "names no host"),
        ("pulsar://:6650", "names no host"),
        ("pulsar://broker:", "has an empty port"),
        ("pulsar://broker:66x", "port '66x' is not a number from 1 to 65535"),
        ("pulsar://broker:70000", "port '70000' is not a number from 1 to 65535"),
        ("pulsar://broker:6650/tenant", "a service URL has no path"),
        ("pulsar://::1:6650", "put an IPv6 host in brackets"),
        ("pulsar://[::1:6650", "is not [IPv6 address]:port"),
    ],
)
def test_bad_service_urls_are_refused_with_a_clear_message(url: str, says: str) -> None:
    with pytest.raises(urls.BadUrlError) as raised:
        urls.parse_service_url(url)
    assert says in str(raised.value)
    assert repr(url) in str(raised.value)


def test_broker_url_names_one_host() -> None:
    assert urls.parse_broker_url("pulsar+ssl://b:6651") == (Address("b", 6651), True)
    with pytest.raises(urls.BadUrlError, match="a broker URL names one host"):
        urls.parse_broker_url("pulsar://a:1,b:2")


def test_bare_host_port_only_where_allowed() -> None:
    assert urls.broker_address("b:6650", bare=True) == Address("b", 6650)
    with pytest.raises(urls.BadUrlError, match="expected pulsar://host:port"):
        urls.broker_address("b:6650")
    with pytest.raises(urls.BadUrlError, match="expected host:port"):
        urls.broker_address("b", bare=True)


def test_plain_broker_address_refuses_a_tls_url() -> None:
    with pytest.raises(urls.BadUrlError, match="is a TLS URL"):
        urls.broker_address("pulsar+ssl://b:6651")
