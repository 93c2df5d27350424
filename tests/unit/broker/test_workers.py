"""``magnetar broker --workers N``: the ports handed to workers, their command line, and the
refusals (the processes themselves: tests/integration/broker/test_workers.py)."""

from __future__ import annotations

import socket

import pytest

from magnetar import cli
from magnetar.broker import workers


def test_shared_ports_round_trip_and_bad_values() -> None:
    ports = workers.SharedPorts(port=6650, http_port=8080, https_port=8443)
    assert ports.to_arg() == "port=6650,http_port=8080,https_port=8443"
    assert workers.SharedPorts.parse(ports.to_arg()) == ports
    with pytest.raises(ValueError, match="'bogus=1' is not one of"):
        workers.SharedPorts.parse("port=6650,bogus=1")
    with pytest.raises(ValueError, match="70000 is not a port"):
        workers.SharedPorts.parse("port=70000")
    with pytest.raises(ValueError, match="no binary-protocol port"):
        workers.SharedPorts.parse("http_port=8080")


def test_worker_argv_gives_own_free_ports_and_the_shared_ones_last() -> None:
    shared = workers.SharedPorts(port=6650, http_port=8080)
    argv = workers.worker_argv(["--metadata-url", "etcd://e:2379", "--port", "6650"], shared)
    assert argv[1:4] == ["-m", "magnetar.cli", "broker"]
    tail = argv[4:]
    # the parent's flags first, then the worker's own ports (0: free ones): the last wins
    assert tail[:4] == ["--metadata-url", "etcd://e:2379", "--port", "6650"]
    assert tail[4:] == [
        "--port", "0", "--http-port", "0",
        "--workers", "1", "--worker-of", "port=6650,http_port=8080",
    ]  # fmt: skip
    args = cli.parse_args(["broker", *tail])
    assert (args.port, args.http_port, args.workers) == (0, 0, 1)
    assert workers.SharedPorts.parse(args.worker_of) == shared


def test_reserved_ports_fix_zero_and_refuse_a_taken_port() -> None:
    fixed, held = workers.reserve_ports("127.0.0.1", workers.SharedPorts(port=0, http_port=0))
    try:
        assert fixed.port and fixed.http_port and fixed.port != fixed.http_port
        # a plain listener (no SO_REUSEPORT) cannot take a reserved port
        with socket.socket() as s, pytest.raises(OSError):
            s.bind(("127.0.0.1", fixed.port))
    finally:
        for sock in held:
            sock.close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot bind 127.0.0.1:{port}"):
            workers.reserve_ports("127.0.0.1", workers.SharedPorts(port=port))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "0"], "--workers 0: at least 1"),
        (
            ["--workers", "2", "--advertised-listeners", "internal:pulsar://h:6650"],
            "--workers > 1 with advertisedListeners",
        ),
    ],
)
def test_bad_worker_settings_are_refused(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    rc = cli.main(["broker", "--metadata-url", "etcd://127.0.0.1:1", *extra])
    assert rc == 2
    assert message in capsys.readouterr().err
