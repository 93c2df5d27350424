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
import urllib.error
import uuid

import pytest

from tests.clients.conftest import Target
from tests.clients.test_bundles import _request as admin_request
from tests.support.schema_cases import CASES, Case


def _upload(target: Target, topic: str, definition: dict[str, object]) -> int:
    body = json.dumps({"type": "AVRO", "schema": json.dumps(definition), "properties": {}})
    try:
        admin_request(target, "POST", f"/admin/v2/schemas/{topic}/schema", body.encode())
    except urllib.error.HTTPError as err:
        return err.code
    return 200


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_compatibility_answers_are_pulsars(client_target: Target, case: Case) -> None:
    ns = f"public/compat-{uuid.uuid4().hex[:8]}"
    admin_request(client_target, "PUT", f"/admin/v2/namespaces/{ns}", b"{}")
    strategy = json.dumps(case.strategy).encode()
    admin_request(
        client_target, "PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", strategy
    )
    topic = f"{ns}/t"
    assert _upload(client_target, topic, case.old) == 200
    status = _upload(client_target, topic, case.new)
    assert status in (200, 409), f"{case.id}: HTTP {status}"
    answer = status == 200
    assert answer == case.compatible, (
        f"{case.id} under {case.strategy}: {client_target.name} says "
        f"{'compatible' if answer else 'incompatible'}, Pulsar 4.0.7 "
        f"{'compatible' if case.compatible else 'incompatible'}"
    )
