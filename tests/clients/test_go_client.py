"""The official Go client's conformance suite (tests/clients/go, ``go test -json``) against each
target of ``conftest.py``; a scenario failing anywhere fails this test, with the failed
scenarios and their output in the report."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.clients.conftest import ROOT, Target

GO = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if Path(p).exists()), None)


@dataclass
class GoTestRun:
    """What ``go test -json`` reported: each test's (and subtest's) result and output."""

    results: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, list[str]] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)
    """Output outside any test (build errors, TestMain, the package summary)."""

    @classmethod
    def parse(cls, text: str) -> GoTestRun:
        run = cls()
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                run.other.append(line)
                continue
            if not isinstance(event, dict):
                run.other.append(line)
                continue
            test, action = event.get("Test"), event.get("Action")
            text_out = event.get("Output", "")
            if test is None:
                if action in ("output", "build-output") and text_out:
                    run.other.append(text_out.rstrip("\n"))
            elif action == "output":
                run.outputs.setdefault(test, []).append(text_out)
            elif action in ("pass", "fail", "skip"):
                run.results[test] = action
        return run

    def scenarios(self, result: str) -> list[str]:
        """Top-level tests with that result (subtests count with their parent)."""
        return sorted(t for t, r in self.results.items() if r == result and "/" not in t)

    def failure_report(self, limit: int = 3000) -> str:
        parts = []
        for test in sorted(t for t, r in self.results.items() if r == "fail"):
            lines = [
                ln for ln in "".join(self.outputs.get(test, [])).splitlines() if "level=" not in ln
            ]
            parts.append(f"--- {test}\n" + "\n".join(lines)[-limit:])
        return "\n".join(parts)


def test_go_test_json_parsing() -> None:
    events = [
        {"Action": "run", "Test": "TestA"},
        {"Action": "output", "Test": "TestA", "Output": "    a_test.go:3: boom\n"},
        {"Action": "output", "Test": "TestA", "Output": 'time=x level=warning msg="noise"\n'},
        {"Action": "fail", "Test": "TestA"},
        {"Action": "pass", "Test": "TestB/sub"},
        {"Action": "pass", "Test": "TestB"},
        {"Action": "output", "Output": "FAIL\tmagnetar.test/clients\t1.0s\n"},
        {"Action": "fail"},
    ]
    run = GoTestRun.parse("\n".join(json.dumps(e) for e in events) + "\nnot json\n")
    assert run.scenarios("fail") == ["TestA"] and run.scenarios("pass") == ["TestB"]
    assert "boom" in run.failure_report() and "noise" not in run.failure_report()
    assert run.other == ["FAIL\tmagnetar.test/clients\t1.0s", "not json"]


@pytest.mark.skipif(GO is None, reason="the Go suite needs Go (go on PATH or /usr/local/go)")
@pytest.mark.timeout(1200)  # a cold cache first downloads and compiles pulsar-client-go
def test_go_client_suite(client_target: Target, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(ROOT / "scripts/clients/go-suite.sh"),
            client_target.service_url,
            client_target.admin_url,
            "-json",
        ],
        env=client_target.env(),
        capture_output=True,
        timeout=600,
        check=False,
    )
    out = done.stdout.decode(errors="replace")
    (tmp_path / "go-test.json").write_text(out)
    run = GoTestRun.parse(out)
    passed, failed = run.scenarios("pass"), run.scenarios("fail")
    print(
        f"go client suite against {client_target.name}: {len(passed) + len(failed)} "
        f"scenarios, {len(failed)} failed {failed}"
    )
    outside = "\n".join(run.other)[-2000:] + done.stderr.decode(errors="replace")[-2000:]
    assert passed or failed, f"no scenario ran (exit {done.returncode}):\n{outside}"
    assert not failed, f"failed: {failed}\n{run.failure_report()}"
    assert done.returncode == 0, f"go test exited {done.returncode}:\n{outside}"
    client_target.check_spread("gt-")
