"""Free ports are picked below the kernel's ephemeral range, checked with a bind, and not
handed out twice in a row."""

from __future__ import annotations

import socket
from pathlib import Path

from magnetar.common import ports


def test_the_ephemeral_range_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    f = tmp_path / "ip_local_port_range"
    f.write_text("40000\t50000\n")
    assert ports.ephemeral_range(f) == (40000, 50000)
    assert ports.ephemeral_range(tmp_path / "missing") == (32768, 60999)
    f.write_text("garbage\n")
    assert ports.ephemeral_range(f) == (32768, 60999)


def test_ports_are_picked_below_the_ephemeral_range_and_bind() -> None:
    low, _ = ports.ephemeral_range()
    pick = ports.PortPicker()
    picked = [pick() for _ in range(200)]
    assert len(set(picked)) == len(picked)
    if ports.candidate_range((low, 65535)) is not None:
        assert all(ports.LOWEST <= p < min(low, ports.HIGHEST + 1) for p in picked)
    for p in picked[:20]:
        with socket.socket() as s:
            s.bind((ports.LOOPBACK, p))


def test_a_port_with_a_listener_is_never_handed_out() -> None:
    # A picker whose only candidates are a thousand ports, most of which are held here.
    held: list[socket.socket] = []
    try:
        for port in range(ports.LOWEST, ports.LOWEST + 1000):
            s = socket.socket()
            try:
                s.bind((ports.LOOPBACK, port))
            except OSError:
                s.close()
                continue
            s.listen()
            held.append(s)
            if len(held) == 990:
                break
        taken = {s.getsockname()[1] for s in held}
        pick = ports.PortPicker(ephemeral=(ports.LOWEST + 1000, 60999))
        for _ in range(5):
            assert pick() not in taken
    finally:
        for s in held:
            s.close()


def test_a_low_ephemeral_range_falls_back_to_the_kernels_pick() -> None:
    assert ports.candidate_range((ports.LOWEST + 10, 60999)) is None
    pick = ports.PortPicker(ephemeral=(1024, 65535))
    first, second = pick(), pick()
    assert first != second
    assert 0 < first < 65536
