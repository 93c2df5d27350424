"""The ``magnetar`` data source against a secured standalone (tests/support/secured.py: TLS
only for clients here, token authentication, authorization on): reads on both read paths and
writes with a token over ``pulsar+ssl://`` and ``https://`` (hostname verified); without a
token, with a forged one and with a role lacking ``consume``, a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from tests.support.procs import started
from tests.support.secured import Secured

NS = "private/auth"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with started(Secured(tmp_path_factory.mktemp("secured-spark"))) as proc:
        proc.set_up_like_the_client_tests()
        proc.admin(
            "namespaces", "grant-permission", NS, "--actions", "produce", "--role", "writer-only"
        )
        yield proc


def _options(secured: Secured, topic: str, *, token: str | None, **extra: str) -> dict[str, str]:
    options = {
        "serviceUrl": secured.tls_service_url,
        "adminUrl": secured.https_url,
        "topic": topic,
        "tlsTrustCertsFilePath": str(secured.ca.ca_file),
        "tlsHostnameVerificationEnable": "true",
        **extra,
    }
    if token is not None:
        options["authPluginClassName"] = TOKEN_PLUGIN
        options["authParams"] = f"token:{token}"
    return options


def _sink_options(secured: Secured, topic: str, *, token: str | None) -> dict[str, str]:
    options = _options(secured, topic, token=token)
    del options["adminUrl"]  # (writes take none)
    return options


def _produce(secured: Secured, topic: str, n: int) -> None:
    client = secured.client(authentication=pulsar.AuthenticationToken(secured.token("app")))
    try:
        producer = client.create_producer(topic, batching_enabled=True)
        for i in range(n):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        producer.close()
    finally:
        client.close()


@pytest.fixture(scope="module")
def topic(secured: Secured) -> str:
    secured.admin(
        "namespaces", "grant-permission", NS, "--actions", "produce,consume", "--role", "app"
    )
    name = f"persistent://{NS}/spark-secured"
    _produce(secured, name, 40)
    return name


@pytest.mark.parametrize("read_path", ["protocol", "client"])
def test_a_token_over_tls_reads(secured: Secured, spark: Any, topic: str, read_path: str) -> None:
    options = _options(secured, topic, token=secured.token("app"), readPath=read_path)
    rows = spark.read.format("magnetar").options(**options).load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(f"m{i}".encode() for i in range(40))


def test_the_connector_prefixed_option_names_work_too(
    secured: Secured, spark: Any, topic: str
) -> None:
    options = {
        "serviceUrl": secured.tls_service_url,
        "adminUrl": secured.https_url,
        "topic": topic,
        "pulsar.client.authPluginClassName": TOKEN_PLUGIN,
        "pulsar.client.authParams": f"token:{secured.token('app')}",
        "pulsar.client.tlsTrustCertsFilePath": str(secured.ca.ca_file),
    }
    assert spark.read.format("magnetar").options(**options).load().count() == 40


def test_a_token_over_tls_writes(secured: Secured, spark: Any, topic: str) -> None:
    sink = f"persistent://{NS}/spark-secured-sink"
    df = spark.createDataFrame([(f"w{i}",) for i in range(25)], "value string")
    df.write.mode("append").format("magnetar").options(
        **_sink_options(secured, sink, token=secured.token("app"))
    ).save()
    read = _options(secured, sink, token=secured.token("app"))
    rows = spark.read.format("magnetar").options(**read).load().collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(f"w{i}".encode() for i in range(25))


def test_without_a_token_the_read_is_refused_naming_the_reason(
    secured: Secured, spark: Any, topic: str
) -> None:
    # anonymous (the anonymousUserRole) may connect, but not read private/auth
    with pytest.raises(Exception, match=r"admin API GET \S+: HTTP 401"):
        spark.read.format("magnetar").options(**_options(secured, topic, token=None)).load()


def test_without_a_token_the_write_is_refused(secured: Secured, spark: Any) -> None:
    sink = f"persistent://{NS}/spark-secured-anonymous"
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="the broker refused the producer: AuthorizationError"):
        df.write.mode("append").format("magnetar").options(
            **_sink_options(secured, sink, token=None)
        ).save()


def test_a_forged_token_is_refused_at_load(secured: Secured, spark: Any, topic: str) -> None:
    forged = secured.token("app")[:-4] + "AAAA"
    with pytest.raises(Exception, match="refused the connection: AuthenticationError"):
        spark.read.format("magnetar").options(**_options(secured, topic, token=forged)).load()


def test_untrusted_tls_is_refused_at_load(secured: Secured, spark: Any, topic: str) -> None:
    options = _options(secured, topic, token=secured.token("app"))
    del options["tlsTrustCertsFilePath"]  # the system's CAs do not know the test CA
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        spark.read.format("magnetar").options(**options).load()


@pytest.mark.parametrize("read_path", ["protocol", "client"])
def test_a_role_without_consume_gets_an_authorization_error(
    secured: Secured, spark: Any, topic: str, read_path: str
) -> None:
    options = _options(secured, topic, token=secured.token("writer-only"), readPath=read_path)
    df = spark.read.format("magnetar").options(**options).load()  # planning: produce suffices
    with pytest.raises(Exception, match=f"reading {topic}: the broker refused: AuthorizationError"):
        df.collect()


def test_bad_security_options_are_refused_at_load(secured: Secured, spark: Any, topic: str) -> None:
    plugin = {"authPluginClassName": TOKEN_PLUGIN, "authParams": "token:x"}
    for extra, says in [
        ({"authPluginClassName": "com.example.Nope"}, "unsupported auth plugin"),
        ({"authParams": "token:x"}, "authParams needs authPluginClassName"),
        ({**plugin, "authParams": "file:///nonexistent/token"}, "/nonexistent/token"),
        ({"tlsTrustCertsFilePath": "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"),
        ({"tlsAllowInsecureConnection": "maybe"}, "must be true or false"),
        ({**plugin, "pulsar.client.authParams": "token:y"}, "disagree"),
    ]:
        options = {**_options(secured, topic, token=None), **extra}
        with pytest.raises(Exception, match=says):
            spark.read.format("magnetar").options(**options).load()
