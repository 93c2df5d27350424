"""The standalone's supervision across its own death: a SIGKILLed standalone leaves no
instance behind (an instance stops when its supervisor is gone), and started again on the
same data directory it runs the stored functions again, which process what came meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

import pulsar
import pytest

from tests.integration.functions.test_functions import (
    EXAMPLES,
    TIMEOUT_S,
    admin,
    receive_all,
    running,
)
from tests.support import standalone as standalone_procs
from tests.support.wait import wait_until


def gone(pid: int) -> bool:
    """The process has exited (a zombie not reaped yet counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_killed_standalone_leaves_no_instance_and_resumes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data = tmp_path_factory.mktemp("supervision") / "data"
    with standalone_procs.running(data) as standalone:
        admin(
            standalone, "functions", "create", "--name", "survivor",
            "--py", str(EXAMPLES / "exclamation_function.py"),
            "--classname", "exclamation_function.ExclamationFunction",
            "--inputs", "surv-in", "--output", "surv-out", "--subs-position", "Earliest",
        )  # fmt: skip
        running(standalone, "survivor")
        report = data / "functions/public/default/survivor/0/metrics.json"
        pid = wait_until(
            lambda: json.loads(report.read_text()).get("pid") if report.exists() else None,
            timeout=TIMEOUT_S,
            what="the instance's first report",
        )
        standalone.kill()
        wait_until(lambda: gone(pid), timeout=TIMEOUT_S, what="the orphaned instance stops")

        standalone.restart()
        running(standalone, "survivor")
        with standalone_procs.client(standalone) as client:
            out = client.subscribe(
                "surv-out", "check", initial_position=pulsar.InitialPosition.Earliest
            )
            client.create_producer("surv-in").send(b"again")
            assert [m.data() for m in receive_all(out, 1)] == [b"again!"]
            out.close()
