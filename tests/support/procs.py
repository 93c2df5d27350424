"""Start real processes for tests on free loopback ports, wait for readiness with a bounded
timeout, and stop them by pid — never by name, never leaving one behind."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol, Self, TypeVar

from magnetar.common.ports import free_port
from tests.support.wait import wait_until

LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


# SIGKILL for the child when the test process dies, so a test run that is killed (timeout,
# Ctrl-C) leaves no server behind even without its teardown. util-linux's setpriv sets it and
# execs the command: no Python runs between fork and exec, so subprocess can vfork. A
# preexec_fn (the fallback without setpriv) forks with the parent's gRPC threads running, and
# gRPC's fork handlers then abort the child now and then (SIGABRT before exec).
_SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In the child, before exec (fallback when setpriv is missing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def with_parent_death_signal(argv: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` wrapped so the child gets SIGKILL when this process dies, and the
    preexec_fn to pass along (None when setpriv does it)."""
    if _SETPRIV:
        return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv], None
    return list(argv), (_die_with_parent if sys.platform == "linux" else None)


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


class Proc:
    """A child process run for a test, with its output captured in a log file.

    ``start()`` launches it (in its own process group), ``ready`` is polled after each start;
    ``stop()`` sends SIGTERM then SIGKILL by pid; ``kill()`` is SIGKILL at once (crash test).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        log_path: Path,
        ready: Callable[[], bool] | None = None,
        ready_timeout: float = 30.0,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.ready = ready
        self.ready_timeout = ready_timeout
        self.env = env
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> Proc:
        assert self.popen is None or self.popen.poll() is not None, "already running"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        env = {**os.environ, **(self.env or {})}
        argv, preexec = with_parent_death_signal(self.argv)
        self.popen = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.cwd,
            start_new_session=True,
            preexec_fn=preexec,
        )
        log.close()
        if self.ready is not None:
            self._wait_ready(self.ready)
        return self

    def _wait_ready(self, ready: Callable[[], bool]) -> None:
        """Until ``ready()``; RuntimeError at once if the process exits, TimeoutError (the
        process killed) after ``ready_timeout``."""
        popen = self.popen
        assert popen is not None

        def up() -> bool:
            if popen.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited with {popen.returncode}:\n{self.tail()}")
            return ready()

        try:
            wait_until(up, timeout=self.ready_timeout, what=f"{self.argv[0]} ready")
        except AssertionError:
            self.kill()
            raise TimeoutError(
                f"{self.argv[0]} not ready after {self.ready_timeout}s:\n{self.tail()}"
            ) from None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL by pid, and reap."""
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by pid, SIGKILL if it is not gone after ``timeout``."""
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


class ServerProc:
    """A server the tests run as a subprocess through its :class:`Proc` (``proc``, set by the
    subclass): started, stopped, killed and restarted by pid, on the same ports and data."""

    proc: Proc
    stop_timeout_s: float = 10.0
    """How long :meth:`stop` waits after SIGTERM before SIGKILL."""

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def start(self) -> Self:
        self.proc.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self.proc.stop(self.stop_timeout_s if timeout is None else timeout)

    def kill(self) -> None:
        """kill -9, by pid."""
        self.proc.kill()

    def restart(self) -> None:
        """Start again on the same data directory and ports (after kill or stop)."""
        self.proc.kill()
        self.proc.start()

    def alive(self) -> bool:
        return self.proc.alive()

    def tail(self, n: int = 40) -> str:
        return self.proc.tail(n)

    def log(self) -> str:
        """Everything the process has logged so far."""
        return self.proc.log_path.read_text(errors="replace")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports."""
    return [free_port() for _ in range(n)]


class Startable(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Startable)


@contextlib.contextmanager
def started(server: S) -> Iterator[S]:
    """``server`` started (ready), stopped by pid on exit: the body of every fixture that runs
    a server process (etcd, MinIO, a standalone)."""
    server.start()
    try:
        yield server
    finally:
        server.stop()


class TlsAddresses:
    """The client-facing TLS URLs of a process listening on ``tls_port`` (pulsar+ssl) and
    ``https_port``, named ``localhost`` (the test certificates' name) so that hostname
    verification applies."""

    tls_port: int
    https_port: int

    @property
    def tls_service_url(self) -> str:
        return f"pulsar+ssl://localhost:{self.tls_port}"

    @property
    def https_url(self) -> str:
        return f"https://localhost:{self.https_port}"
