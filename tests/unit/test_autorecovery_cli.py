"""``magnetar autorecovery``'s command line: required and bad settings are refused with a
message naming them, before anything connects; the recovery workers' rate limit
(``--replication-rate-by-bytes``) holds a copy to its rate."""

from __future__ import annotations

import pytest

from magnetar import cli
from magnetar.autorecovery.worker import Pacer


def test_metadata_url_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["autorecovery"])
    assert exc.value.code == 2
    assert "--metadata-url (or metadataServiceUri in --config FILE) is required" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--lost-bookie-recovery-delay", "--lost-bookie-recovery-delay must not be negative"),
        ("--open-ledger-grace", "--open-ledger-grace must not be negative"),
        ("--periodic-check-interval", "--periodic-check-interval must not be negative (0: off)"),
    ],
)
def test_negative_durations_are_refused(
    flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = cli.main(["autorecovery", "--metadata-url", "etcd://127.0.0.1:9", flag, "-1"])
    assert rc == 2
    assert f"magnetar autorecovery: {message}" in capsys.readouterr().err


def test_options_reach_the_auditor_and_the_worker() -> None:
    args = cli.parse_args(
        ["autorecovery", "--metadata-url", "etcd://etcd:2379", "--lost-bookie-recovery-delay",
         "60", "--periodic-check-interval", "0", "--open-ledger-grace", "12",
         "--session-ttl", "4", "--min-racks-per-write-quorum", "2",
         "--replication-rate-by-bytes", "1048576",
         "--enforce-min-racks-per-write-quorum", "true"]
    )  # fmt: skip
    options = cli._autorecovery_options(args)
    assert options.auditor.lost_bookie_recovery_delay == 60.0
    assert options.auditor.periodic_check_interval == 0.0
    assert (options.auditor.session_ttl, options.worker.session_ttl) == (4.0, 4.0)
    assert options.worker.open_ledger_grace == 12.0
    assert options.worker.rate_bytes == 1048576
    assert (options.min_racks_per_write_quorum, options.enforce_min_racks) == (2, True)


class _Clock:
    """A clock that only moves when the pacer sleeps (or the test says so)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_pacer_holds_the_copy_to_the_rate() -> None:
    clock = _Clock()
    pacer = Pacer(1000.0, clock=clock, sleep=clock.sleep)
    for _ in range(10):  # 10 batches of 500 bytes at 1,000 bytes/s: the 10th goes at 4.5 s
        await pacer.take(500)
    assert clock.now - 100.0 == pytest.approx(4.5)
    # time spent elsewhere (the worker idle) is not saved up for a burst
    clock.now += 60.0
    before = clock.now
    for _ in range(3):
        await pacer.take(2000)
    assert clock.now - before == pytest.approx(4.0)


async def test_pacer_does_not_wait_for_a_copy_slower_than_the_rate() -> None:
    clock = _Clock()
    pacer = Pacer(1000.0, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        await pacer.take(100)
        clock.now += 1.0  # the copy itself takes 1 s per 100 bytes: 10 times the rate's time
    assert clock.slept == []
