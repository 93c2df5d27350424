"""Picking a free loopback port that stays free until its server binds it.

Binding port 0 hands out a port from the kernel's ephemeral range, the range outgoing
connections draw their local ports from too. A port picked that way and bound a moment later
(a test fixture that builds several servers before it starts them, the standalone's bookie
port remembered in its data directory and bound again at each start) can meanwhile be the
local end of some connection, and the bind fails with ``EADDRINUSE``. Ports below the
ephemeral range are taken only by listeners, so :func:`free_port` picks there and checks each
with a bind. They stay below 30000 too: Kubernetes' NodePort range starts there, and kube-proxy
redirects connections to a node port on 127.0.0.1 of a node running on this host.
"""

from __future__ import annotations

import collections
import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"
LOWEST = 10000
"""The lowest port handed out: well above the registered ports of common services."""
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
HIGHEST = 29999
"""The highest: below Kubernetes' NodePort range (30000-32767)."""
_DEFAULT_EPHEMERAL = (32768, 60999)
_MIN_SPAN = 1000
_ATTEMPTS = 200


def ephemeral_range(path: Path = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL
    return low, high


def candidate_range(ephemeral: tuple[int, int]) -> range | None:
    """The ports :func:`free_port` picks from: from :data:`LOWEST` up to the ephemeral range
    and :data:`HIGHEST`, or None when that leaves fewer than a thousand."""
    end = min(ephemeral[0], HIGHEST + 1)
    if end - LOWEST < _MIN_SPAN:
        return None
    return range(LOWEST, end)


def _bindable(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_pick(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class PortPicker:
    """Free ports below the ephemeral range, none handed out twice among the last 1,024.

    The memory matters when ports are picked well before they are bound: without it a caller
    that picks four ports first could be handed the same one twice.
    """

    def __init__(self, ephemeral: tuple[int, int] | None = None, host: str = LOOPBACK) -> None:
        self._host = host
        self._candidates = candidate_range(ephemeral or ephemeral_range())
        self._recent: collections.deque[int] = collections.deque(maxlen=1024)
        self._random = random.SystemRandom()

    def __call__(self) -> int:
        if self._candidates is not None:
            for _ in range(_ATTEMPTS):
                port = self._random.choice(self._candidates)
                if port not in self._recent and _bindable(port, self._host):
                    self._recent.append(port)
                    return port
        # A host whose ephemeral range starts low (or a crowded one): let the kernel pick.
        while True:
            port = _kernel_pick(self._host)
            if port not in self._recent:
                self._recent.append(port)
                return port


free_port = PortPicker()
"""A loopback port that was free a moment ago, outside the ephemeral range where it can."""
