"""A bookie started with the wrong directories, or with another bookie's identity, refuses
to start with a message naming the problem (exit status 3)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bookies import BookieProc
from tests.support.procs import LOOPBACK, free_port

pytestmark = pytest.mark.etcd


def run_bookie(
    url: str, *, port: int, data: Path, journal: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar.cli",
            "bookie",
            "--metadata-url",
            url,
            "--port",
            str(port),
            "--http-port",
            str(free_port()),
            "--bind-address",
            LOOPBACK,
            "--advertised-address",
            LOOPBACK,
            "--data-dir",
            str(data),
            "--journal-dir",
            str(journal),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_wrong_directories_and_reused_identities_are_refused(
    metadata_url: str, tmp_path: Path
) -> None:
    a = BookieProc(metadata_url, tmp_path).start()
    b = BookieProc(metadata_url, tmp_path).start()
    a.stop()
    b.stop()

    # A's id with empty directories: its disks were wiped or swapped
    r = run_bookie(metadata_url, port=a.port, data=tmp_path / "new-d", journal=tmp_path / "new-j")
    assert r.returncode == 3, r.stderr
    assert "refusing to start" in r.stderr and "not its directories" in r.stderr

    # A's directories under another id
    r = run_bookie(metadata_url, port=free_port(), data=a.ledgers_dir, journal=a.journal_dir)
    assert r.returncode == 3, r.stderr
    assert f"belongs to bookie {a.bookie_id}" in r.stderr

    # A's journal with B's data directory
    r = run_bookie(metadata_url, port=a.port, data=b.ledgers_dir, journal=a.journal_dir)
    assert r.returncode == 3, r.stderr
    assert "belong to different bookies" in r.stderr

    # a copy of A's directories, formatted again under A's id, is another instance
    clone = tmp_path / "clone"
    shutil.copytree(a.data_dir, clone)
    for cookie in (clone / "ledgers" / "COOKIE", clone / "journal" / "COOKIE"):
        text = cookie.read_text()
        cookie.write_text(text.replace('"instance_id": "', '"instance_id": "f00d'))
    r = run_bookie(metadata_url, port=a.port, data=clone / "ledgers", journal=clone / "journal")
    assert r.returncode == 3, r.stderr
    assert "the id was reused" in r.stderr

    # and A itself still starts on its own directories
    a.start()
    a.stop()
