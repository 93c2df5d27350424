"""tests/support/procs.py: a server a test starts dies with the test process, even when the
test process is SIGKILLed and never runs its teardown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
import sys, time
from pathlib import Path
from tests.support.procs import Proc
child = Proc(["sleep", "120"], log_path=Path(sys.argv[1])).start()
print(child.pid, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited: only its parent (gone) could reap it
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


def test_child_dies_with_a_killed_test_process(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "child.log")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())

        def command() -> str:
            with open(f"/proc/{child}/cmdline") as f:
                return f.read().split("\0")[0]

        # the command itself runs under the pid Proc reports (exec'd in place)
        wait_until(lambda: command() == "sleep", timeout=10, what="child exec'd")
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not alive(child), timeout=10, what="child killed with its parent")
    finally:
        parent.kill()
        parent.wait()
