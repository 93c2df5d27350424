"""What mutual TLS costs on the broker -> bookie hop: ledger adds to a plaintext bookie and
to a TLS bookie (client certificates required), in paired rounds.

Two bookie processes on the same disk, one serving plaintext and one serving mutual TLS, both
registered in one etcd; two ledger clients, one plaintext and one TLS (each places ledgers only
on the bookie of its transport). Each round runs the plaintext writer and then the TLS writer
for the same time (E/Wq/Aq 1/1/1, a window of pipelined adds) and prints adds/s, the bookie's
CPU per add, and the TLS/plaintext ratio; the medians of the rounds' ratios come last.
Certificates come from a throwaway CA. Figures only: nothing here passes or fails.

    .venv/bin/python bench/bookie_tls_bench.py [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.bookies import BookieProc
from tests.support.certs import CA, MountedSecret
from tests.support.etcd import EtcdServer

import bookie_bench  # bench/ is the script's directory
from magnetar.common import grpctls, tlsfiles
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import open_store


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_writer(
    url: str, tls: grpctls.ClientTlsConfig | None, *, size: int, seconds: float
) -> tuple[float, int]:
    """(adds/s, adds) of one writer pipelining ``size``-byte adds into one ledger."""
    store = await open_store(url)
    client = LedgerClient(store, tls=tls.open() if tls is not None else None)
    try:
        handle = await client.create(ensemble_size=1, write_quorum=1, ack_quorum=1)
        result = await bookie_bench.pipelined_adds(handle, size=size, seconds=seconds)
        await handle.close()
        return result
    finally:
        await client.close()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # each client warns once about the other bookie
    rows: list[tuple[int, int, float, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bookie-tls-bench-", dir=".") as tmp:
        base = Path(tmp)
        ca = CA()
        bookie_secret, client_secret = MountedSecret(base / "bookie"), MountedSecret(base / "c")
        bookie_secret.write(ca.issue("bookie"), ca.cert_pem)
        client_secret.write(ca.issue("broker"), ca.cert_pem)
        tls = grpctls.ClientTlsConfig(
            files=tlsfiles.TlsFiles(
                cert_file=client_secret.cert_file,
                key_file=client_secret.key_file,
                trust_file=client_secret.ca_file,
            )
        )
        etcd = EtcdServer(base / "etcd").start()
        plain_bookie = tls_bookie = None
        try:
            plain_bookie = BookieProc(etcd.url, base / "plain").start()
            tls_bookie = BookieProc(
                etcd.url,
                base / "tls",
                extra_args=[
                    f"--tls-certificate-file={bookie_secret.cert_file}",
                    f"--tls-key-file={bookie_secret.key_file}",
                    f"--tls-trust-certs-file={bookie_secret.ca_file}",
                    "--tls-client-authentication=true",
                ],
            ).start()
            for size in (100, 1024):
                for n in range(args.rounds):
                    measured = []
                    for bookie, settings in ((plain_bookie, None), (tls_bookie, tls)):
                        cpu0 = cpu_seconds(bookie.proc.pid or 0)
                        rate, adds = asyncio.run(
                            run_writer(etcd.url, settings, size=size, seconds=args.seconds)
                        )
                        cpu_us = (cpu_seconds(bookie.proc.pid or 0) - cpu0) / adds * 1e6
                        measured.append((rate, cpu_us))
                    (plain_rate, plain_cpu), (tls_rate, tls_cpu) = measured
                    rows.append((size, n, plain_rate, tls_rate, plain_cpu, tls_cpu))
        finally:
            for b in (tls_bookie, plain_bookie):
                if b is not None:
                    b.stop()
            etcd.stop()

    print(
        f"{'entry':>6} {'round':>5} {'plain adds/s':>12} {'TLS adds/s':>11} {'ratio':>6} "
        f"{'plain bookie CPU/add':>20} {'TLS bookie CPU/add':>18}"
    )
    for size, n, plain_rate, tls_rate, plain_cpu, tls_cpu in rows:
        print(
            f"{size:6d} {n:5d} {plain_rate:12.0f} {tls_rate:11.0f} {tls_rate / plain_rate:6.2f} "
            f"{plain_cpu:17.1f} us {tls_cpu:15.1f} us"
        )
    for size in sorted({r[0] for r in rows}):
        ratios = [r[3] / r[2] for r in rows if r[0] == size]
        print(
            f"{size} B entries: TLS/plaintext adds/s, median of {len(ratios)} rounds: "
            f"{statistics.median(ratios):.2f}"
        )


if __name__ == "__main__":
    main()
