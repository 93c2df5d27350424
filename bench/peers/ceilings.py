"""The machine's raw ceilings, measured by the same run as the systems: durable writes
(4 KiB write + fdatasync in a loop, on the disk the brokers write to) and loopback TCP
(one sender process blasting 64 KiB writes at one reader process)."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
from pathlib import Path
from typing import Any


def fsync_ceiling(directory: Path, seconds: float) -> dict[str, Any]:
    path = directory / "fsync-ceiling.bin"
    block = os.urandom(4096)
    lat: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        start = time.perf_counter()
        end = start + seconds
        while True:
            t = time.perf_counter()
            if t >= end:
                break
            os.write(fd, block)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    lat.sort()
    return {
        "ops": len(lat) / elapsed,
        "mbs": len(lat) * 4096 / elapsed / 1e6,
        "p50_ms": lat[len(lat) // 2] * 1000,
        "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
    }


def _reader(port_q: Any, seconds: float) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port_q.put(srv.getsockname()[1])
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        with conn:
            while conn.recv_into(view):
                pass


def loopback_ceiling(seconds: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    reader = ctx.Process(target=_reader, args=(q, seconds), daemon=True)
    reader.start()
    port = q.get(timeout=30)
    chunk = os.urandom(64 * 1024)
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as s:
        start = time.perf_counter()
        end = start + seconds
        while time.perf_counter() < end:
            for _ in range(64):
                s.sendall(chunk)
            sent += 64 * len(chunk)
        elapsed = time.perf_counter() - start
    reader.join(timeout=30)
    return {"mbs": sent / elapsed / 1e6}


def machine() -> dict[str, Any]:
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024**2, 1),
        "cpu": cpu_model,
        "kernel": os.uname().release,
    }
