"""``magnetar broker|bookie|standalone --config FILE`` run for real as subprocesses: an
unknown key stops startup at once with the key's name (exit 2), and a flag overrides the
file (a standalone whose file gives one port and whose flag gives another listens on the
flag's)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.procs import LOOPBACK, Proc, free_port, port_open
from tests.support.wait import wait_until

CONF = {"broker": "broker.conf", "bookie": "bookkeeper.conf", "standalone": "standalone.conf"}


@pytest.mark.parametrize("command", sorted(CONF))
def test_unknown_key_fails_startup_naming_it(tmp_path: Path, command: str) -> None:
    conf = tmp_path / CONF[command]
    conf.write_text("# a Pulsar file with a key Magnetar does not know\nbogusSetting=1\n")
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", command, "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip() == (
        f"magnetar {command}: {CONF[command]}: unknown key 'bogusSetting' (line 2), one Apache "
        "Pulsar does not know either"
    )
    assert elapsed < 10, f"took {elapsed:.1f}s to refuse"


def test_standalone_flag_overrides_the_file(tmp_path: Path) -> None:
    file_port, flag_port, http_port = free_port(), free_port(), free_port()
    assert len({file_port, flag_port, http_port}) == 3
    conf = tmp_path / "standalone.conf"
    conf.write_text(
        f"brokerServicePort={file_port}\n"
        f"webServicePort={http_port}\n"
        f"bindAddress={LOOPBACK}\n"
        f"advertisedAddress={LOOPBACK}\n"
        "clusterName=standalone\n"
        "managedLedgerDefaultEnsembleSize=1\n"
        "authenticationEnabled=false\n"
        "tlsCertificateFilePath=\n"
    )
    argv = [
        sys.executable, "-m", "magnetar.cli", "standalone",
        "--config", str(conf),
        "--data-dir", str(tmp_path / "data"),
        "--port", str(flag_port),
    ]  # fmt: skip
    proc = Proc(
        argv,
        log_path=tmp_path / "standalone.log",
        ready=lambda: port_open(http_port),
        ready_timeout=60,
    )
    proc.start()
    try:
        wait_until(lambda: port_open(flag_port), timeout=30, what="the flag's port")
        assert not port_open(file_port), "the file's port must not be used"
        assert f"service URL: pulsar://127.0.0.1:{flag_port}" in proc.tail()
    finally:
        proc.stop()
