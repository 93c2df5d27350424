"""``/admin/v2/resource-quotas`` (pulsar-admin ``resource-quotas``, issue 26): the default
quota and a bundle's own, answered as Apache Pulsar answers them. Against every Magnetar
target and, with ``make test-clients-pulsar``, Apache Pulsar 4.0.7.
"""

from __future__ import annotations

import uuid

from tests.clients.admin_http import call
from tests.clients.conftest import Target

BASE = "/admin/v2/resource-quotas"


def test_resource_quotas(client_target: Target) -> None:
    t = client_target
    ns = f"public/quotas-{uuid.uuid4().hex[:8]}"
    assert call(t, "PUT", f"/admin/v2/namespaces/{ns}", {"bundles": {"numBundles": 4}})[0] == 204
    status, before = call(t, "GET", BASE)
    assert status == 200 and set(before) == {
        "msgRateIn", "msgRateOut", "bandwidthIn", "bandwidthOut", "memory", "dynamic",
    }  # fmt: skip
    bundle = f"{BASE}/{ns}/0x00000000_0x40000000"
    assert call(t, "GET", bundle) == (200, before)  # none of its own: the default
    own = {"msgRateIn": 1, "msgRateOut": 2, "bandwidthIn": 3, "bandwidthOut": 4, "memory": 5}
    assert call(t, "POST", bundle, {**own, "dynamic": False}) == (204, None)
    floats = {k: float(v) for k, v in own.items()}
    assert call(t, "GET", bundle) == (200, {**floats, "dynamic": False})
    assert call(t, "DELETE", bundle) == (204, None)
    assert call(t, "GET", bundle) == (200, before)

    new_default = {**floats, "dynamic": True}
    try:
        assert call(t, "POST", BASE, new_default) == (204, None)
        assert call(t, "GET", BASE) == (200, new_default)
        assert call(t, "GET", f"{BASE}/{ns}/0x40000000_0x80000000") == (200, new_default)
    finally:
        assert call(t, "POST", BASE, before) == (204, None)

    status, answer = call(t, "GET", f"{BASE}/{ns}/0x00000000_0x30000000")
    assert status == 412
    assert answer["reason"] == (
        f"Invalid upper boundary for bundle {ns}/0x00000000_0x30000000. "
        f"Expected upper boundary of {ns}/0x00000000_0x40000000"
    )
    status, answer = call(
        t, "GET", f"{BASE}/public/nosuch-{uuid.uuid4().hex[:6]}/0x00000000_0xffffffff"
    )
    assert (status, answer["reason"]) == (404, "Namespace does not exist")
    assert call(t, "POST", BASE, {"msgRateIn": "x"})[0] == 400
