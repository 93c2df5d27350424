"""``magnetar broker --workers N``: one broker pod, N broker processes, one set of ports.

Why this module exists: a broker process runs one event loop, so it uses one core. Rather
than threads (the interpreter lock) it runs N processes, each a complete broker of the
cluster -- its own metadata session, registration, bundle ownerships, managed ledgers and
ledger client -- so nothing new decides where a topic lives: bundles are spread over the
workers by the least-loaded choice and lookups answer Connect or Redirect per owner, exactly
as between the brokers of a multi-broker cluster (``broker/ownership.py``).

Ports: each worker listens on ports of its own (port 0: the kernel picks them; its broker id
and the URLs lookups answer carry them), and also on the pod's configured ports
(``brokerServicePort``, ``webServicePort`` and their TLS forms), which all workers bind with
``SO_REUSEPORT``: the kernel spreads new connections to a shared port over the workers. A
client's lookup lands on any worker and is redirected to the owner's own port; an admin call
about a topic another worker owns gets the usual 307 to it.

The parent (this module's :func:`run`) holds a bound, non-listening socket on each shared port
(so a port given as 0 is fixed once, and nobody else takes the port while a worker restarts),
starts the workers, restarts one that exits (after a growing delay, ``common.backoff``) and on
SIGTERM/SIGINT stops them all (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`). A worker
killed with SIGKILL loses its metadata session when the lease runs out; its bundles are then
taken by the next lookups and their open ledgers fenced and recovered, as for a dead broker.

``/metrics`` for the pod: the parent makes a private directory (mode 0700) where worker ``i``
of ``N`` (``--worker-slot i/N``, ``--worker-dir``) answers on the Unix socket
``worker-i.sock`` with its own exposition (:func:`serve_exposition`). A scrape on a shared
HTTP port, whichever worker the kernel hands it to, reads its siblings' expositions there
(:func:`read_expositions`) and answers with all of them, each series labelled ``worker="i"``
(``broker/http.py``); a worker's own HTTP port still answers for that worker alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from magnetar.common import backoff

log = logging.getLogger(__name__)

STOP_GRACE_S = 25.0
"""Seconds a worker gets to unload its topics after SIGTERM before it is killed."""

_FIELDS = ("port", "tls_port", "http_port", "https_port")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a worker before exec (Linux): SIGTERM when the parent dies, so a parent killed
    with SIGKILL leaves no worker holding the shared ports. The parent runs no gRPC or other
    threads, so a ``preexec_fn`` is safe here."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedPorts:
    """The pod-wide ports every worker serves (None: that listener is off)."""

    port: int | None = None
    tls_port: int | None = None
    http_port: int | None = None
    https_port: int | None = None

    def to_arg(self) -> str:
        """The ``--worker-of`` value that hands these ports to a worker."""
        return ",".join(
            f"{name}={value}" for name in _FIELDS if (value := getattr(self, name)) is not None
        )

    @classmethod
    def parse(cls, text: str) -> SharedPorts:
        """Read :meth:`to_arg`'s form back; ValueError naming what is wrong."""
        given: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep or name not in _FIELDS:
                raise ValueError(f"--worker-of: {part!r} is not one of {', '.join(_FIELDS)}=PORT")
            port = int(value)
            if not 0 < port < 65536:
                raise ValueError(f"--worker-of: {name} {port} is not a port")
            given[name] = port
        if "port" not in given and "tls_port" not in given:
            raise ValueError("--worker-of: no binary-protocol port (port= or tls_port=)")
        return cls(**given)


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """Which of the pod's workers this process is, and where the workers answer each other
    (the parent's private directory of Unix sockets)."""

    index: int
    count: int
    directory: Path

    def socket(self, index: int) -> Path:
        """Where worker ``index`` serves its own exposition."""
        return self.directory / f"worker-{index}.sock"

    @classmethod
    def parse(cls, slot: str, directory: str) -> WorkerSlot:
        """``--worker-slot i/N`` and ``--worker-dir``; ValueError naming what is wrong."""
        index, sep, count = slot.partition("/")
        if sep and index.isdigit() and count.isdigit() and int(index) < int(count):
            return cls(int(index), int(count), Path(directory))
        raise ValueError(f"--worker-slot {slot!r}: not INDEX/COUNT with INDEX < COUNT")


EXPOSITION_TIMEOUT_S = 5.0
"""How long a pod-level scrape waits for a sibling's exposition (a worker restarting, or too
busy to answer, is left out and shown by ``magnetar_broker_worker_up 0``)."""


async def _closed(writer: asyncio.StreamWriter) -> None:
    """Close ``writer`` and wait until its transport is gone: a transport left closing when
    its loop ends is finalised by the garbage collector, with a warning, at any later moment
    (on Python 3.11 a finalizer that imports in the middle of another import breaks it)."""
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def serve_exposition(path: Path, render: Callable[[], Awaitable[bytes]]) -> asyncio.Server:
    """Answer every connection to the Unix socket ``path`` with ``render()``'s bytes (this
    worker's Prometheus text), then close it. A socket file a killed predecessor left is
    replaced."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(await render())
            await writer.drain()
        except Exception:  # a sibling gone mid-answer, a collector failing: log, keep serving
            log.warning("answering a sibling's scrape failed", exc_info=True)
        finally:
            await _closed(writer)

    await asyncio.to_thread(path.unlink, missing_ok=True)
    return await asyncio.start_unix_server(answer, path=str(path))


async def _read_exposition(path: Path, timeout_s: float) -> bytes | None:
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_unix_connection(str(path))
            try:
                return await reader.read()
            finally:
                await _closed(writer)
    except (OSError, TimeoutError) as err:  # not started yet, restarting, or stuck
        log.info("no exposition from %s: %s", path.name, err)
        return None


async def read_expositions(
    slot: WorkerSlot, own: bytes, *, timeout_s: float = EXPOSITION_TIMEOUT_S
) -> list[tuple[int, bytes | None]]:
    """Every worker's exposition, in worker order: ``own`` for this one, the siblings' read
    concurrently from their sockets (None: that worker did not answer in ``timeout_s``)."""
    others = [i for i in range(slot.count) if i != slot.index]
    got = await asyncio.gather(*(_read_exposition(slot.socket(i), timeout_s) for i in others))
    by_index: dict[int, bytes | None] = {slot.index: own, **dict(zip(others, got, strict=True))}
    return sorted(by_index.items())


def _reserve(host: str, port: int) -> socket.socket:
    """A bound, not listening, ``SO_REUSEPORT`` socket on ``port``: fixes a port 0 and keeps
    the port for the workers (only listening sockets receive connections)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def reserve_ports(host: str, wanted: SharedPorts) -> tuple[SharedPorts, list[socket.socket]]:
    """Bind every configured shared port (0: a free one); the ports and the sockets that hold
    them (closed by the caller at exit). OSError when a port is taken."""
    held: list[socket.socket] = []
    fixed: dict[str, int] = {}
    try:
        for name in _FIELDS:
            port = getattr(wanted, name)
            if port is None:
                continue
            sock = _reserve(host, port)
            held.append(sock)
            fixed[name] = int(sock.getsockname()[1])
    except OSError as err:
        for sock in held:
            sock.close()
        raise OSError(f"cannot bind {host}:{port} for the broker's workers: {err}") from err
    return dataclasses.replace(wanted, **fixed), held


def worker_argv(args: Sequence[str], shared: SharedPorts, directory: Path) -> list[str]:
    """The command line of the workers: the parent's ``magnetar broker`` arguments (``args``,
    without the program and subcommand), then its own ports (0: free ones), the shared ones
    and the workers' socket directory; argparse keeps the last value of a flag given twice.
    :class:`Workers` adds each one's ``--worker-slot``."""
    own = []
    for name, flag in (
        ("port", "--port"),
        ("tls_port", "--broker-service-port-tls"),
        ("http_port", "--http-port"),
        ("https_port", "--web-service-port-tls"),
    ):
        if getattr(shared, name) is not None:
            own += [flag, "0"]
    return [
        sys.executable,
        "-m",
        "magnetar.cli",
        "broker",
        *args,
        *own,
        "--workers",
        "1",
        "--worker-of",
        shared.to_arg(),
        "--worker-dir",
        str(directory),
    ]


class Workers:
    """The running worker processes: started, restarted when one exits, stopped."""

    def __init__(self, argv: list[str], count: int) -> None:
        self.argv = argv
        self.count = count
        self.procs: list[asyncio.subprocess.Process | None] = [None] * count
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for index in range(self.count):
            self._tasks.append(asyncio.create_task(self._keep(index)))

    async def _keep(self, index: int) -> None:
        delays = backoff.Backoff(initial_s=0.5, max_s=10.0)
        while not self._stopping:
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                "--worker-slot",
                f"{index}/{self.count}",
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
            self.procs[index] = proc
            log.info("broker worker %d: pid %d", index, proc.pid)
            code = await proc.wait()
            if self._stopping:
                return
            delay = delays.next()
            log.warning(
                "broker worker %d (pid %d) exited with %s; restarting in %.1f s",
                index,
                proc.pid,
                code,
                delay,
            )
            await asyncio.sleep(delay)

    async def stop(self) -> None:
        self._stopping = True
        live = [p for p in self.procs if p is not None and p.returncode is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        if live:  # they stop together: one grace period for all
            await asyncio.wait([asyncio.create_task(p.wait()) for p in live], timeout=STOP_GRACE_S)
        for proc in live:
            if proc.returncode is None:
                log.warning("broker worker pid %d still running: killing it", proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def run(args: Sequence[str], *, count: int, host: str, wanted: SharedPorts) -> None:
    """``magnetar broker --workers N`` (N > 1): reserve the shared ports, run ``count``
    workers until SIGTERM/SIGINT, then stop them."""
    shared, held = reserve_ports(host, wanted)
    # the workers' sockets (pod-level /metrics): private to this user
    directory = Path(tempfile.mkdtemp(prefix=f"magnetar-broker-{os.getpid()}-"))
    workers = Workers(worker_argv(args, shared, directory), count)
    try:
        await workers.start()
        print(
            f"broker: {count} worker processes sharing "
            + " ".join(f"{n}={getattr(shared, n)}" for n in _FIELDS if getattr(shared, n)),
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("stopping %d broker workers", count)
    finally:
        await workers.stop()
        for sock in held:
            sock.close()
        shutil.rmtree(directory, ignore_errors=True)
