"""advertisedListeners with TLS URLs (Pulsar's rules, docs/configuration.md): the
configuration checks, the internal listener's URLs as the broker's own, and the listeners as
the broker's registration stores them. Pure: no process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magnetar import conffile
from magnetar.broker.config import BrokerConfig, Listener
from magnetar.broker.ownership import BrokerInfo
from magnetar.security.config import SecurityConfig
from magnetar.security.tls import TlsSettings

LISTENERS = (
    "internal:pulsar://10.0.0.7:6650,internal:pulsar+ssl://10.0.0.7:6651,"
    "external:pulsar://node-3.example:31650,external:pulsar+ssl://node-3.example:31651"
)


def _tls(tmp_path: Path) -> SecurityConfig:
    return SecurityConfig(
        tls=TlsSettings(certificate=str(tmp_path / "c.pem"), key=str(tmp_path / "k.pem"))
    )


def test_the_internal_listener_gives_the_brokers_urls(tmp_path: Path) -> None:
    config = BrokerConfig(
        tls_port=6651,
        security=_tls(tmp_path),
        advertised_listeners=conffile.listeners(LISTENERS),
        internal_listener_name="internal",
    )
    assert config.service_url == "pulsar://10.0.0.7:6650"
    assert config.service_url_tls == "pulsar+ssl://10.0.0.7:6651"


def test_registration_keeps_both_urls_of_each_listener() -> None:
    info = BrokerInfo(
        "b:6650",
        "pulsar://b:6650",
        "http://b:8080",
        listeners=(
            Listener("internal", "pulsar://b:6650", "pulsar+ssl://b:6651"),
            Listener("external", "pulsar://x:1", ""),
        ),
    )
    stored = json.loads(info.to_json())["advertisedListeners"]
    assert stored == {
        "internal": {
            "brokerServiceUrl": "pulsar://b:6650",
            "brokerServiceUrlTls": "pulsar+ssl://b:6651",
        },
        "external": {"brokerServiceUrl": "pulsar://x:1"},
    }
    back = BrokerInfo.from_json("b:6650", info.to_json())
    assert back.listener("internal") == Listener(
        "internal", "pulsar://b:6650", "pulsar+ssl://b:6651"
    )
    assert back.listener("nope") is None
    assert back.listener(None) == Listener("", "pulsar://b:6650", "")


@pytest.mark.parametrize(
    ("text", "tls_port", "needle"),
    [
        ("a:pulsar://h:1,a:pulsar://h:2", None, "a second pulsar://"),
        ("a:pulsar://h:1,b:pulsar://h:1", None, "both name h:1"),
        ("a:pulsar+ssl://h:1", 6651, "no pulsar:// URL"),
        ("a:pulsar://h:1,a:pulsar+ssl://h:2", None, "no TLS port"),
        ("a:pulsar://h:1", 6651, "no pulsar+ssl:// URL"),
    ],
)
def test_pulsars_rules_refuse_with_a_reason(
    tmp_path: Path, text: str, tls_port: int | None, needle: str
) -> None:
    security = _tls(tmp_path) if tls_port else SecurityConfig()
    with pytest.raises(ValueError, match=needle.replace("+", r"\+")):
        BrokerConfig(
            tls_port=tls_port, security=security, advertised_listeners=conffile.listeners(text)
        )


@pytest.mark.parametrize("text", ["a:https://h:1", "pulsar://h:1", "a:pulsar://h:1/path"])
def test_a_listener_that_is_not_a_broker_url_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="pulsar"):
        conffile.listeners(text)
