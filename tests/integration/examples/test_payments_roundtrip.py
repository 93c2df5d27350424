"""The payments example's round trip without Spark (what `make demo` runs through the
proxy): `payments_client produce` then `consume` against a real standalone, and `consume`
failing when a payment is missing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.standalone import StandaloneProc


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[StandaloneProc]:
    proc = StandaloneProc(tmp_path / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


def payments(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.spark.examples.payments_client", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_produce_then_consume_every_payment(standalone: StandaloneProc) -> None:
    common = ["--service-url", standalone.service_url, "--count", "50", "--seed", "3"]
    topic = ["--topic", "persistent://public/default/payments"]
    out = payments("produce", *common, *topic)
    assert out.returncode == 0, out.stderr
    assert "produced 50 payments" in out.stdout
    out = payments("consume", *common, *topic)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "consumed all 50 payments, each as produced" in out.stdout
    assert any(line.startswith("m0: ") for line in out.stdout.splitlines()), out.stdout
    # another seed's payments were never produced: consume says so and fails
    other = ["--service-url", standalone.service_url, "--count", "5", "--seed", "4"]
    out = payments("consume", *other, *topic, "--timeout", "3")
    assert out.returncode == 1 and "payments missing: ['s4-0'" in out.stderr, out.stderr
