"""``magnetar broker --workers N``: the ports handed to workers, their command line, the
refusals, and the pod-level ``/metrics`` (the workers' sockets, the merge of their series);
the processes themselves: tests/integration/broker/test_workers.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Summary
from prometheus_client.openmetrics import parser as om_parser
from prometheus_client.parser import text_string_to_metric_families

from magnetar import cli
from magnetar.broker import metrics, workers


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
    directory = Path("/run/magnetar-broker")
    argv = workers.worker_argv(
        ["--metadata-url", "etcd://e:2379", "--port", "6650"], shared, directory
    )
    assert argv[1:4] == ["-m", "magnetar.cli", "broker"]
    tail = argv[4:]
    # the parent's flags first, then the worker's own ports (0: free ones): the last wins
    assert tail[:4] == ["--metadata-url", "etcd://e:2379", "--port", "6650"]
    assert tail[4:] == [
        "--port", "0", "--http-port", "0",
        "--workers", "1", "--worker-of", "port=6650,http_port=8080",
        "--worker-dir", "/run/magnetar-broker",
    ]  # fmt: skip
    args = cli.parse_args(["broker", *tail, "--worker-slot", "1/2"])
    assert (args.port, args.http_port, args.workers) == (0, 0, 1)
    assert workers.SharedPorts.parse(args.worker_of) == shared
    slot = workers.WorkerSlot.parse(args.worker_slot, args.worker_dir)
    assert slot == workers.WorkerSlot(1, 2, directory)
    assert slot.socket(0) == directory / "worker-0.sock"


@pytest.mark.parametrize("bad", ["2/2", "1", "-1/2", "a/b", "1/"])
def test_bad_worker_slots_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=f"--worker-slot '{bad}': not INDEX/COUNT"):
        workers.WorkerSlot.parse(bad, "/tmp")


async def test_siblings_answer_with_their_exposition_or_are_left_out(tmp_path: Path) -> None:
    """Worker 0 of 3 reads worker 1's socket; worker 2 never started (None)."""
    slot = workers.WorkerSlot(0, 3, tmp_path)
    stale = slot.socket(1)
    stale.touch()  # a file a killed worker left: replaced

    async def render() -> bytes:
        return b"one\n"

    server = await workers.serve_exposition(stale, render)
    try:
        parts = await workers.read_expositions(slot, b"zero\n", timeout_s=2)
    finally:
        server.close()
        await server.wait_closed()
    assert parts == [(0, b"zero\n"), (1, b"one\n"), (2, None)]


def _own(reg: CollectorRegistry) -> bytes:
    body, _ = metrics.render(reg, metrics.OPENMETRICS)
    return body


def test_workers_series_merge_by_family_with_a_worker_label() -> None:
    regs = [CollectorRegistry(), CollectorRegistry()]
    for index, reg in enumerate(regs):
        Gauge("pulsar_broker_topics_count", "topics", ["cluster"], registry=reg).labels("c").set(
            index + 1
        )
        Counter("lookups", "lookups", registry=reg).inc(10 * (index + 1))
        Summary("latency_ms", "latency", registry=reg).observe(index + 1.0)
    parts = [(0, _own(regs[0])), (1, _own(regs[1])), (2, None)]
    for accept in (None, metrics.OPENMETRICS):
        body, _ = metrics.render_workers(parts, accept, cluster="c")
        text = body.decode()
        # one family per name, as the formats require (a second TYPE line is refused)
        types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
        assert len(types) == len(set(types)), text
        parse = (
            om_parser.text_string_to_metric_families if accept else text_string_to_metric_families
        )
        values = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parse(text)
            for s in family.samples
        }
        for index in (0, 1):
            w = str(index)
            assert values[("pulsar_broker_topics_count", (("cluster", "c"), ("worker", w)))] == (
                index + 1
            )
            assert values[("lookups_total", (("worker", w),))] == 10 * (index + 1)
            assert values[("latency_ms_count", (("worker", w),))] == 1
            assert values[("magnetar_broker_worker_up", (("cluster", "c"), ("worker", w)))] == 1
        assert values[("magnetar_broker_worker_up", (("cluster", "c"), ("worker", "2")))] == 0


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
