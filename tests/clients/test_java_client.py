"""The official Java client's conformance suite (tests/clients/java, JUnit 5 through Maven)
against each target of ``conftest.py``, with the current client (4.0) and the 3.0 LTS client
(protocol version negotiation with an older client; on a standalone, on the secured
standalone -- TLS and token authentication of the older client -- and on Apache Pulsar in
its mode); a scenario failing anywhere fails this test, with the failed scenarios and their
messages in the report."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.clients.conftest import ROOT, Target


def surefire_summary(reports: Path) -> tuple[int, list[str]]:
    """(scenarios run, 'Class.method: message' of each failure) from the XML reports."""
    run, failed = 0, []
    for report in sorted(reports.glob("TEST-*.xml")):
        for case in ET.parse(report).getroot().iter("testcase"):
            run += 1
            for problem in [*case.iter("failure"), *case.iter("error")]:
                message = (problem.get("message") or problem.text or "").strip().splitlines()
                failed.append(
                    f"{case.get('classname', '?').rsplit('.', 1)[-1]}.{case.get('name')}: "
                    f"{message[0] if message else problem.tag}"
                )
    return run, failed


@pytest.mark.skipif(
    shutil.which("java") is None or shutil.which("mvn") is None,
    reason="the Java suite needs Java 17 and Maven (java, mvn on PATH)",
)
@pytest.mark.parametrize("client_version", ["4.0.7", "3.0.7"])
@pytest.mark.timeout(1200)  # a cold .cache/m2 first downloads each client's dependencies
def test_java_client_suite(client_target: Target, client_version: str, tmp_path: Path) -> None:
    if client_version != "4.0.7" and client_target.name == "cluster":
        pytest.skip("the 3.0 client runs against the standalone (the cluster adds no protocol)")
    build = tmp_path / "build"  # this run's own (sessions may run the suite at once)
    # Apache Pulsar's standalone here runs no functions worker (bench/peers/systems.py)
    extra = ["-Dmagnetar.functionsWorker=false"] if client_target.name == "pulsar" else []
    log = tmp_path / "java-suite.log"
    with log.open("wb") as out:
        done = subprocess.run(
            [
                str(ROOT / "scripts/clients/java-suite.sh"),
                client_target.service_url,
                client_target.admin_url,
                f"-Dpulsar.client.version={client_version}",
                *extra,
                # which system answers: a difference docs/compatibility.md documents is
                # skipped on the side it belongs to (AdminConformanceTest.againstPulsar)
                f"-Dmagnetar.target={client_target.name}",
            ],
            env={**client_target.env(), "JAVA_SUITE_BUILD_DIR": str(build)},
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    run, failed = surefire_summary(build / "surefire-reports")
    print(
        f"java client {client_version} suite against {client_target.name}: {run} scenarios, "
        f"{len(failed)} failed"
    )
    for line in failed:
        print("  FAILED", line)
    tail = log.read_text(errors="replace")[-3000:]
    assert run > 0, f"no scenario ran (exit {done.returncode}):\n{tail}"
    assert not failed and done.returncode == 0, "\n".join(failed) or tail
    client_target.check_spread("jt-")
