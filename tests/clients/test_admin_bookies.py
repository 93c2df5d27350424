"""``/admin/v2/bookies/racks-info`` (pulsar-admin ``bookies``, issue 26): the bookies' rack
placement set, read and removed, answered as Apache Pulsar answers it; on Magnetar the rack
set there is the one ``bookies/all`` reports (and placement uses, tests/unit/ledger). Against
every Magnetar target and, with ``make test-clients-pulsar``, Apache Pulsar 4.0.7.
"""

from __future__ import annotations

import uuid

from tests.clients.admin_http import call
from tests.clients.conftest import Target

BASE = "/admin/v2/bookies/racks-info"


def test_racks_info_set_get_delete(client_target: Target) -> None:
    t = client_target
    status, listed = call(t, "GET", "/admin/v2/bookies/all")
    assert status == 200 and listed["bookies"], listed
    real = listed["bookies"][0]["bookieId"]
    # bookie ids no bookie has, beside the real one, in groups unique to this run
    run = uuid.uuid4().hex[:6]
    other = f"10.255.{int(run[:2], 16)}.{int(run[2:4], 16)}:3181"
    g1, g2 = f"g1-{run}", f"g2-{run}"

    def missing(bookie: str) -> tuple[int, dict[str, str]]:
        return 404, {"reason": f"Bookie rack placement configuration not found: {bookie}"}

    try:
        assert call(t, "GET", f"{BASE}/{other}") == missing(other)
        assert call(t, "DELETE", f"{BASE}/{other}") == missing(other)
        status, answer = call(t, "POST", f"{BASE}/{other}", {"rack": "/r1"})
        assert (status, answer["reason"]) == (412, "Bookie 'group' parameters is missing")
        status, answer = call(t, "POST", f"{BASE}/{other}?group={g1}", {"rack": "/r1/inner"})
        assert status == 412 and answer["reason"].startswith("Bookie 'rack' parameter is invalid")

        assert call(t, "POST", f"{BASE}/{real}?group={g1}", {"rack": "/rack-a"}) == (204, None)
        info = {"rack": "rack-b", "hostname": "b.example"}
        assert call(t, "POST", f"{BASE}/{other}?group={g2}", info) == (204, None)
        status, config = call(t, "GET", BASE)
        assert status == 200
        assert config[g1] == {real: {"rack": "/rack-a"}}
        assert config[g2] == {other: info}
        assert call(t, "GET", f"{BASE}/{other}") == (200, info)
        if t.name != "pulsar":  # Magnetar's bookies/all carries each bookie's rack
            by_id = {
                b["bookieId"]: b for b in call(t, "GET", "/admin/v2/bookies/all")[1]["bookies"]
            }
            assert by_id[real]["rack"] == "/rack-a"

        # set again in another group: moved, and the emptied group goes
        assert call(t, "POST", f"{BASE}/{real}?group={g2}", {"rack": "/rack-c"}) == (204, None)
        config = call(t, "GET", BASE)[1]
        assert g1 not in config
        assert config[g2] == {other: info, real: {"rack": "/rack-c"}}
        assert call(t, "GET", f"{BASE}/{real}") == (200, {"rack": "/rack-c"})

        assert call(t, "DELETE", f"{BASE}/{real}") == (204, None)
        assert call(t, "GET", f"{BASE}/{real}") == missing(real)
        assert call(t, "DELETE", f"{BASE}/{real}") == missing(real)
        if t.name != "pulsar":  # back to the rack it registered with
            by_id = {
                b["bookieId"]: b for b in call(t, "GET", "/admin/v2/bookies/all")[1]["bookies"]
            }
            assert by_id[real]["rack"] == "/default-rack"
    finally:
        for bookie in (real, other):
            call(t, "DELETE", f"{BASE}/{bookie}")
    assert g2 not in call(t, "GET", BASE)[1]
