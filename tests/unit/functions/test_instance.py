"""The instance's pure helpers: output sequence ids keep the input order (what
EFFECTIVELY_ONCE's deduplication relies on) and are never 0; names resolve to the user's
module, Pulsar's SerDes (``serde.X``) or an error naming what is missing; metrics reports."""

from __future__ import annotations

import types
from pathlib import Path

import pulsar
import pytest
from pulsar.functions import serde

from magnetar.functions import instance


def ids(*triples: tuple[int, int, int]) -> list[int]:
    return [instance.sequence_id(pulsar.MessageId(-1, ledger, e, b)) for ledger, e, b in triples]


def test_sequence_ids_follow_the_input_order() -> None:
    ordered = ids((1, 0, -1), (1, 1, -1), (1, 1, 0), (1, 1, 5), (1, 2, -1), (2, 0, -1), (9, 7, 3))
    assert ordered == sorted(ordered) and len(set(ordered)) == len(ordered)
    assert min(ordered) > 0 and max(ordered) < 2**63


def test_import_name(tmp_path: Path) -> None:
    (tmp_path / "mod_for_import_test.py").write_text("class C:\n    pass\n")
    module = instance.import_name("mod_for_import_test", str(tmp_path))
    assert isinstance(module, types.ModuleType)
    assert instance.import_name("mod_for_import_test.C", str(tmp_path)).__name__ == "C"
    assert instance.import_name("serde.PickleSerDe", None) is serde.PickleSerDe
    assert instance.import_name("serde.IdentitySerDe", None) is serde.IdentitySerDe
    with pytest.raises(ImportError, match="no 'Missing'"):
        instance.import_name("mod_for_import_test.Missing", str(tmp_path))
    with pytest.raises(ImportError, match="no module"):
        instance.import_name("nowhere_module.X", None)


def test_metrics_report() -> None:
    metrics = instance.Metrics()
    metrics.received_one()
    metrics.processed_one(2.0)
    metrics.received_one()
    metrics.user_exception(ValueError("no"), 4.0)
    metrics.system_exception("send failed")
    metrics.record("size", 3)
    report = metrics.report()
    assert (report["received"], report["processed"]) == (2, 1)
    assert report["userExceptions"] == report["systemExceptions"] == 1
    assert report["latencySumMs"] == 6.0
    assert report["latestUserExceptions"][0]["exceptionString"] == "ValueError: no"
    assert report["latestSystemExceptions"][0]["exceptionString"] == "send failed"
    assert report["userMetrics"] == {"size": {"sum": 3.0, "count": 1.0}}
    assert report["oneMin"]["received"] == 2 and report["oneMin"]["latencySumMs"] == 6.0


def test_state_unreachable_is_an_error_not_a_silent_drop() -> None:
    import socket

    from magnetar.client.admin import AdminClient
    from magnetar.functions.context import StateClient, StateUnavailableError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = StateClient(AdminClient(f"http://127.0.0.1:{port}", timeout=5.0), "public/default/f")
    for call in (
        lambda: state.put("k", "v"),
        lambda: state.incr("k", 1),
        lambda: state.get("k"),
        lambda: state.delete("k"),
    ):
        with pytest.raises(StateUnavailableError, match="function state"):
            call()
