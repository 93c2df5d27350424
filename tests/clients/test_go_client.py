"""The official Go client's conformance suite (tests/clients/go, ``go test``) against each
target of ``conftest.py``; a scenario failing anywhere fails this test, with the failed
scenarios and their output in the report."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.clients.conftest import ROOT, Target

GO = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if Path(p).exists()), None)


@pytest.mark.skipif(GO is None, reason="the Go suite needs Go (go on PATH or /usr/local/go)")
def test_go_client_suite(client_target: Target) -> None:
    done = subprocess.run(
        [
            str(ROOT / "scripts/clients/go-suite.sh"),
            client_target.service_url,
            client_target.admin_url,
        ],
        capture_output=True,
        timeout=1200,
        check=False,
    )
    out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    passed = re.findall(r"^--- PASS: (\S+)", out, re.MULTILINE)
    failed = re.findall(r"^--- FAIL: (\S+)", out, re.MULTILINE)
    print(
        f"go client suite against {client_target.name}: {len(passed) + len(failed)} "
        f"scenarios, {len(failed)} failed {failed}"
    )
    details = "\n".join(line for line in out.splitlines() if "level=" not in line)[-4000:]
    assert passed, f"no scenario ran (exit {done.returncode}):\n{details}"
    assert not failed and done.returncode == 0, details
    client_target.check_spread("gt-")
