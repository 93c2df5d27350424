"""Metadata-store throughput: compare-and-set puts and gets per second, for both backends.

Why this exists: every ledger roll-over, cursor persist and ownership change is a CAS on the
metadata store, so its rate bounds those operations. Prints figures only (no pass/fail).
Starts its own etcd on free loopback ports in a temporary directory and stops it by pid.

    .venv/bin/python bench/metadata_bench.py [--seconds 2] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

from tests.support.etcd import EtcdServer, etcd_available

from magnetar.metadata import api, open_store

VALUE = b"v" * 200  # a typical small metadata record


async def rate(*, seconds: float, concurrency: int, op: Callable[[int], Awaitable[None]]) -> float:
    """Operations per second of ``concurrency`` tasks each running ``op(task)`` in a loop."""
    done = 0
    stop = time.monotonic() + seconds

    async def worker(n: int) -> None:
        nonlocal done
        while time.monotonic() < stop:
            await op(n)
            done += 1

    began = time.monotonic()
    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    return done / (time.monotonic() - began)


async def bench_store(url: str, *, seconds: float, concurrency: int) -> dict[str, float]:
    store = await open_store(url)
    try:
        versions: dict[int, api.Version] = {}
        for n in range(concurrency):
            versions[n] = await store.put(f"/bench/k{n}", VALUE)

        async def cas(n: int) -> None:
            versions[n] = await store.put(f"/bench/k{n}", VALUE, expected_version=versions[n])

        async def get(n: int) -> None:
            if await store.get(f"/bench/k{n}") is None:
                raise AssertionError("missing key")

        results = {
            "cas_put_1": await rate(seconds=seconds, concurrency=1, op=cas),
            f"cas_put_{concurrency}": await rate(seconds=seconds, concurrency=concurrency, op=cas),
            "get_1": await rate(seconds=seconds, concurrency=1, op=get),
            f"get_{concurrency}": await rate(seconds=seconds, concurrency=concurrency, op=get),
        }
        await store.delete_prefix("/bench")
        return results
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="magnetar-metadata-bench-") as tmp:
        rows: dict[str, dict[str, float]] = {}
        rows["embedded"] = asyncio.run(
            bench_store(
                f"embedded://{tmp}/embedded", seconds=args.seconds, concurrency=args.concurrency
            )
        )
        if etcd_available():
            server = EtcdServer(Path(tmp) / "etcd").start()
            try:
                rows["etcd"] = asyncio.run(
                    bench_store(server.url, seconds=args.seconds, concurrency=args.concurrency)
                )
            finally:
                server.stop()
        else:
            print("etcd not installed: skipping the etcd backend")
    columns = list(next(iter(rows.values())))
    print(f"{'backend':<10}" + "".join(f"{c + ' ops/s':>18}" for c in columns))
    for backend, figures in rows.items():
        print(f"{backend:<10}" + "".join(f"{figures[c]:>18,.0f}" for c in columns))


if __name__ == "__main__":
    main()
