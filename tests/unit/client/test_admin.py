"""The client layer's admin client (``magnetar.client.admin``) against small HTTP servers on
loopback that answer as brokers' admin APIs do (tests/support/admin_echo.py): redirects to
another server keep the method, the body and the credentials; Pulsar's error body becomes
``AdminError``; bad settings and unreachable servers are clear errors. ``error_reason`` and
the operator's copy agree on every answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.client import admin
from magnetar.security.client_auth import Credentials
from magnetar_operator import pulsar as operator_admin
from tests.support import admin_echo
from tests.support.procs import free_port


@pytest.fixture
def brokers() -> Iterator[list[str]]:
    """Two servers answering as admin APIs: the first redirects to the second."""
    with admin_echo.brokers(2) as urls:
        yield urls


def test_a_redirect_to_another_broker_keeps_method_body_and_credentials(
    brokers: list[str],
) -> None:
    client = admin.AdminClient(brokers[0], credentials=Credentials.parse("token", "token:abc"))
    answer = client.call("POST", "/moved", {"n": 5})
    assert answer == {
        "method": "POST",
        "body": '{"n": 5}',
        "authorization": "Bearer abc",
        "server": "b",
    }


def test_a_redirect_loop_is_cut(brokers: list[str]) -> None:
    with pytest.raises(admin.AdminError, match=f"more than {admin.MAX_REDIRECTS} redirects"):
        admin.AdminClient(brokers[0]).call("GET", "/loop")


def test_an_error_status_is_admin_error_with_pulsars_reason(brokers: list[str]) -> None:
    client = admin.AdminClient(brokers[0])
    with pytest.raises(admin.AdminError) as err:
        client.get("/admin/v2/missing/t")
    assert (err.value.status, err.value.reason) == (404, "Topic not found")
    assert str(err.value) == "GET /admin/v2/missing/t: HTTP 404: Topic not found"
    with pytest.raises(admin.AdminError, match="HTTP 500: Internal Server Error"):
        client.get("/admin/v2/plain")


def test_a_token_file_is_read_at_every_call(brokers: list[str], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    client = admin.AdminClient.of(brokers[1], auth_plugin="token", auth_params=f"file://{token}")
    assert client.get("/admin/v2/echo")["authorization"] == "Bearer one"
    token.write_text("two\n")
    assert client.get("/admin/v2/echo")["authorization"] == "Bearer two"


def test_bad_settings_and_unreachable_brokers_are_clear_errors(tmp_path: Path) -> None:
    for url in ("ftp://h:1", "127.0.0.1:8080", "http://"):
        with pytest.raises(admin.AdminConfigError, match="http\\(s\\)://host:port"):
            admin.AdminClient(url)
    with pytest.raises(admin.AdminConfigError, match="unsupported auth plugin"):
        admin.AdminClient.of("http://h:1", auth_plugin="com.example.Nope")
    missing = tmp_path / "ca.pem"
    with pytest.raises(admin.AdminConfigError, match=str(missing)):
        admin.AdminClient("https://h:1", tls_trust_certs_file=str(missing))
    port = free_port()
    with pytest.raises(admin.AdminUnreachable, match=f"cannot reach http://127.0.0.1:{port}"):
        admin.AdminClient(f"http://127.0.0.1:{port}", timeout=5).get("/admin/v2/clusters")


ANSWERS = [
    (404, b'{"reason": "Topic not found"}', "Topic not found"),
    (409, '{"reason": "Namespace already exists"}', "Namespace already exists"),
    (400, b'{"message": "HTTP 400 Bad Request"}', "HTTP 400 Bad Request"),
    (401, b'{"reason": ""}', '{"reason": ""}'),
    (500, b'"a string"', "a string"),
    (502, b"<html>bad gateway</html>", "<html>bad gateway</html>"),
    (503, b"", "Service Unavailable"),
    (599, b"  ", "HTTP 599"),
    (412, b"\xff\xfe not utf-8", "\ufffd\ufffd not utf-8"),
    (400, b"[1, 2]", "[1, 2]"),
]


@pytest.mark.parametrize(("status", "body", "reason"), ANSWERS)
def test_error_reason_and_the_operators_copy_agree(
    status: int, body: bytes | str, reason: str
) -> None:
    assert admin.error_reason(status, body) == reason
    assert operator_admin.error_reason(status, body) == reason
