"""Avro schema compatibility as Apache Pulsar decides it (issue 26): on a namespace with the
case's strategy, a topic gets the ``old`` schema, then the ``new`` one is uploaded through the
admin API (``POST .../schema``): registered (200) when compatible, refused (409) when not.

The cases and Pulsar 4.0.7's answers are in ``tests/support/schema_cases.py`` (aliases of
fields and records, type promotions, unions, enums, fixed). Against every Magnetar target of
the client suites, and with ``make test-clients-pulsar`` against Apache Pulsar itself, where
the answers were taken: a difference fails naming the case and both answers.
"""

from __future__ import annotations

import json
import uuid

import pytest

from magnetar.client import admin
from magnetar.security.client_auth import Credentials
from tests.clients.conftest import Target
from tests.support.schema_cases import CASES, Case


def _admin(target: Target) -> admin.AdminClient:
    """The project's admin client for the target (its token and CA when secured)."""
    return admin.AdminClient(
        target.admin_url,
        credentials=Credentials.parse("token", target.auth_token) if target.auth_token else None,
        tls_trust_certs_file=str(target.tls_trust_certs) if target.tls_trust_certs else None,
    )


def _upload(client: admin.AdminClient, topic: str, definition: dict[str, object]) -> int:
    body = {"type": "AVRO", "schema": json.dumps(definition), "properties": {}}
    try:
        client.call("POST", f"/admin/v2/schemas/{topic}/schema", body)
    except admin.AdminError as err:
        return err.status
    return 200


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_compatibility_answers_are_pulsars(client_target: Target, case: Case) -> None:
    client = _admin(client_target)
    ns = f"public/compat-{uuid.uuid4().hex[:8]}"
    client.call("PUT", f"/admin/v2/namespaces/{ns}", {})
    client.call("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", case.strategy)
    topic = f"{ns}/t"
    assert _upload(client, topic, case.old) == 200
    status = _upload(client, topic, case.new)
    assert status in (200, 409), f"{case.id}: HTTP {status}"
    answer = status == 200
    assert answer == case.compatible, (
        f"{case.id} under {case.strategy}: {client_target.name} says "
        f"{'compatible' if answer else 'incompatible'}, Pulsar 4.0.7 "
        f"{'compatible' if case.compatible else 'incompatible'}"
    )
