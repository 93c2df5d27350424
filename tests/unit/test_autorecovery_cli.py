"""``magnetar autorecovery``'s command line: required and bad settings are refused with a
message naming them, before anything connects."""

from __future__ import annotations

import pytest

from magnetar import cli


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
         "--enforce-min-racks-per-write-quorum", "true"]
    )  # fmt: skip
    options = cli._autorecovery_options(args)
    assert options.auditor.lost_bookie_recovery_delay == 60.0
    assert options.auditor.periodic_check_interval == 0.0
    assert (options.auditor.session_ttl, options.worker.session_ttl) == (4.0, 4.0)
    assert options.worker.open_ledger_grace == 12.0
    assert (options.min_racks_per_write_quorum, options.enforce_min_racks) == (2, True)
