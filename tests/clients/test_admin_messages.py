"""Examining stored messages through the admin REST API (issue 26): ``examinemessage`` (the
n-th message from the oldest or the newest, acknowledged or not) and
``ledger/{ledgerId}/entry/{entryId}`` (``topics get-message-by-id``), the message's metadata
in the ``X-Pulsar-*`` headers. Against every Magnetar target and, with ``make
test-clients-pulsar``, Apache Pulsar 4.0.7. Where Pulsar answers 500 (a position past the
newest end, an entry past the ledger's last) Magnetar answers the message at that end and
404; docs/compatibility.md lists both.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid

from tests.clients.admin_http import call, client
from tests.clients.conftest import Target


def _message(target: Target, path: str) -> tuple[int, bytes, dict[str, str]]:
    """The status, the raw payload and the ``X-Pulsar-*`` headers of ``GET path``."""
    req = urllib.request.Request(target.admin_url + path)
    if target.auth_token:
        req.add_header("Authorization", f"Bearer {target.auth_token}")
    ctx = (
        ssl.create_default_context(cafile=str(target.tls_trust_certs))
        if target.tls_trust_certs
        else None
    )
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            headers = {k: v for k, v in r.headers.items() if k.startswith("X-Pulsar")}
            return r.status, r.read(), headers
    except urllib.error.HTTPError as err:
        return err.code, err.read(), {}


def test_examine_and_get_message_by_id(client_target: Target) -> None:
    t = client_target
    local = f"examine-{uuid.uuid4().hex[:8]}"
    full = f"persistent://public/default/{local}"
    base = f"/admin/v2/persistent/public/default/{local}"
    assert call(t, "PUT", base)[0] == 204
    status, body, _ = _message(t, f"{base}/examinemessage?initialPosition=latest&messagePosition=1")
    reason = "Could not examine messages due to the total message is zero"
    assert (status, json.loads(body)["reason"]) == (412, reason)

    c = client(t)
    try:
        producer = c.create_producer(full, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode(), properties={"k": str(i)}) for i in range(3)]
    finally:
        c.close()
    for query, want in (
        ("initialPosition=earliest&messagePosition=1", 0),
        ("initialPosition=earliest&messagePosition=3", 2),
        ("initialPosition=earliest&messagePosition=10", 2),  # past the end: the newest
        ("initialPosition=latest&messagePosition=1", 2),
        ("initialPosition=latest&messagePosition=2", 1),
    ):
        status, body, headers = _message(t, f"{base}/examinemessage?{query}")
        assert status == 200 and body == f"m{want}".encode(), query
        assert headers["X-Pulsar-Message-ID"] == f"{ids[want].ledger_id()}:{ids[want].entry_id()}"
        assert json.loads(headers["X-Pulsar-PROPERTY"]) == {"k": str(want)}

    mid = ids[1]
    status, body, headers = _message(t, f"{base}/ledger/{mid.ledger_id()}/entry/{mid.entry_id()}")
    assert (status, body) == (200, b"m1")
    assert headers["X-Pulsar-sequence-id"] == "1"
    if t.name != "pulsar":  # Pulsar answers 500 to both (docs/compatibility.md)
        status, body, _ = _message(t, f"{base}/ledger/{mid.ledger_id()}/entry/99")
        assert (status, json.loads(body)["reason"]) == (404, "Message id not found")
        query = "initialPosition=latest&messagePosition=10"  # past the oldest: the oldest
        status, body, _ = _message(t, f"{base}/examinemessage?{query}")
        assert (status, body) == (200, b"m0")
