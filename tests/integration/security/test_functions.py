"""Function instances against a secured standalone with no plaintext listener: the
instances reach the broker over ``pulsar+ssl://`` and its state endpoints over ``https://``
(the broker's certificate and hostname verified against the CA) with the broker's own client
credentials (``brokerClientAuthenticationPlugin`` / ``...Parameters``: a super-user's token),
as Pulsar's functions worker gives its instances; ``trigger`` reaches the function the same
way (docs/functions.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from tests.integration.security.conftest import magnetar_only
from tests.support.procs import started
from tests.support.secured import Secured
from tests.support.wait import wait_until

EXAMPLES = Path(__file__).parents[1] / "functions" / "examples"
TIMEOUT_S = 60.0

pytestmark = magnetar_only("the Apache Pulsar standalone of these suites runs no functions worker")


@pytest.fixture(scope="module")
def tls_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    off = {
        "brokerServicePort": "",
        "webServicePort": "",
        "brokerClientTlsEnabled": "true",
        "tlsHostnameVerificationEnabled": "true",
    }
    with started(Secured(tmp_path_factory.mktemp("secured-functions"), extra_conf=off)) as proc:
        yield proc


def as_json(secured: Secured, *argv: str) -> Any:
    return json.loads(secured.admin("--output", "json", *argv))


def test_instances_use_the_brokers_tls_and_credentials(tls_only: Secured) -> None:
    # the plaintext ports are off: an instance that did not use TLS and a token could not
    # subscribe, produce or count
    tls_only.admin(
        "functions", "create", "--name", "wc",
        "--py", str(EXAMPLES / "wordcount_function.py"),
        "--classname", "wordcount_function.WordCountFunction",
        "--inputs", "sec-wc-in", "--output", "sec-wc-out", "--subs-position", "Earliest",
    )  # fmt: skip
    client = tls_only.client(authentication=pulsar.AuthenticationToken(tls_only.super_token))
    try:
        out = client.subscribe(
            "sec-wc-out", "check", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer("sec-wc-in")
        for line in ("the quick fox", "the end"):
            producer.send(line.encode())
        got = []
        for _ in range(2):
            msg = out.receive(timeout_millis=int(TIMEOUT_S * 1000))
            out.acknowledge(msg)
            got.append(msg.data())
        assert sorted(got) == [b"the end!", b"the quick fox!"]
    finally:
        client.close()
    # the counters went through the broker's state endpoints over HTTPS with the token
    state = as_json(tls_only, "functions", "querystate", "--name", "wc", "--key", "the")
    assert state["numberValue"] == 2
    status = as_json(tls_only, "functions", "status", "--name", "wc")
    assert status["numRunning"] == 1
    assert status["instances"][0]["status"]["numSuccessfullyProcessed"] == 2
    assert status["instances"][0]["status"]["numRestarts"] == 0
    # trigger: the broker sends and reads over TLS with its own client credentials
    answer = tls_only.admin("functions", "trigger", "--name", "wc", "--trigger-value", "a b")
    assert answer.strip() == "a b!"
    tls_only.admin("functions", "delete", "--name", "wc")


def test_an_instance_refused_by_the_broker_says_so(tmp_path: Path) -> None:
    # the broker's client credentials are not a role the broker accepts: the instance
    # cannot connect; its status tells, and it is restarted with the backoff
    conf = {
        "brokerServicePort": "",
        "webServicePort": "",
        "brokerClientTlsEnabled": "true",
        "brokerClientAuthenticationParameters": "token:not-a-token",
    }
    with started(Secured(tmp_path, extra_conf=conf)) as proc:
        proc.admin(
            "functions", "create", "--name", "refused",
            "--py", str(EXAMPLES / "exclamation_function.py"),
            "--classname", "exclamation_function.ExclamationFunction",
            "--inputs", "refused-in",
        )  # fmt: skip

        def failed() -> dict[str, Any] | None:
            status = as_json(proc, "functions", "status", "--name", "refused")
            instance = status["instances"][0]["status"]
            return instance if instance["numRestarts"] >= 1 and instance["error"] else None

        # the client gives up on the refused connection after its operation timeout (30 s)
        instance = wait_until(failed, timeout=3 * TIMEOUT_S, what="the refused instance reported")
        assert "exited with code" in instance["error"]
        assert as_json(proc, "functions", "stats", "--name", "refused")["receivedTotal"] == 0
