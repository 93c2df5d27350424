"""Processing guarantees under SIGKILL of an instance mid-stream: EFFECTIVELY_ONCE reflects
every input exactly once in the output (by content: the output producer per input
partition, sequence ids from the input message ids, the broker's deduplication dropping the
replays), ATLEAST_ONCE loses nothing."""

from __future__ import annotations

import collections
import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from tests.integration.functions.test_functions import EXAMPLES, TIMEOUT_S, admin, as_json
from tests.support import standalone as standalone_procs
from tests.support.standalone import StandaloneProc
from tests.support.wait import holds_for, wait_until

COUNT = 400


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    with standalone_procs.running(tmp_path_factory.mktemp("guarantees") / "data") as proc:
        admin(proc, "namespaces", "create", "public/eo")
        admin(proc, "namespaces", "set-deduplication", "public/eo", "--enable")  # docs/functions.md
        yield proc


@pytest.mark.parametrize("guarantee", ["EFFECTIVELY_ONCE", "ATLEAST_ONCE"])
def test_sigkill_mid_stream(standalone: StandaloneProc, guarantee: str) -> None:
    name = guarantee.lower()
    source, sink = f"persistent://public/eo/{name}-in", f"persistent://public/eo/{name}-out"
    with standalone_procs.client(standalone) as client:
        out = client.subscribe(sink, "check", initial_position=pulsar.InitialPosition.Earliest)
        admin(
            standalone,
            "functions", "create",
            "--tenant", "public", "--namespace", "eo", "--name", name,
            "--py", str(EXAMPLES / "slow_exclamation_function.py"),
            "--classname", "slow_exclamation_function.SlowExclamationFunction",
            "--inputs", source, "--output", sink,
            "--subs-position", "Earliest",
            "--processing-guarantees", guarantee,
        )  # fmt: skip
        producer = client.create_producer(source, batching_enabled=False)
        for i in range(COUNT):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()

        seen: collections.Counter[bytes] = collections.Counter()

        def take(limit: int) -> bool:
            while len(seen) < limit:
                try:
                    msg = out.receive(timeout_millis=200)
                except pulsar.Timeout:
                    return False
                out.acknowledge(msg)
                seen[msg.data()] += 1
            return True

        wait_until(lambda: take(COUNT // 8), timeout=TIMEOUT_S, what="outputs started")
        report = standalone.data_dir / f"functions/public/eo/{name}/0/metrics.json"
        os.kill(json.loads(report.read_text())["pid"], signal.SIGKILL)

        def restarted() -> Any:
            status = as_json(standalone, "functions", "status", "--fqfn", f"public/eo/{name}")[
                "instances"
            ][0]["status"]
            return status["numRestarts"] >= 1

        wait_until(restarted, timeout=TIMEOUT_S, what="the killed instance restarted")
        wait_until(lambda: take(COUNT), timeout=TIMEOUT_S * 2, what="every input reflected")
        assert set(seen) == {f"m{i}!".encode() for i in range(COUNT)}
        if guarantee == "EFFECTIVELY_ONCE":

            def nothing_twice() -> bool:
                take(COUNT + 1)  # whatever else arrives is counted
                return max(seen.values()) == 1 and len(seen) == COUNT

            holds_for(nothing_twice, 3.0, what="no output twice")
        admin(standalone, "functions", "delete", "--fqfn", f"public/eo/{name}")
        out.close()


def test_effectively_once_function_raising_restarts_in_order(standalone: StandaloneProc) -> None:
    source, sink = "persistent://public/eo/flaky-in", "persistent://public/eo/flaky-out"
    with standalone_procs.client(standalone) as client:
        out = client.subscribe(sink, "check", initial_position=pulsar.InitialPosition.Earliest)
        admin(
            standalone,
            "functions", "create",
            "--fqfn", "public/eo/flaky",
            "--py", str(EXAMPLES / "flaky_function.py"),
            "--classname", "flaky_function.FlakyFunction",
            "--inputs", source, "--output", sink,
            "--subs-position", "Earliest",
            "--processing-guarantees", "EFFECTIVELY_ONCE",
        )  # fmt: skip
        producer = client.create_producer(source, batching_enabled=False)
        for value in (b"a", b"boom", b"c"):
            producer.send(value)
        got = []
        for _ in range(3):
            msg = out.receive(timeout_millis=int(TIMEOUT_S * 2000))
            out.acknowledge(msg)
            got.append(msg.data())
        assert got == [b"a!", b"boom!", b"c!"]

        def more() -> bool:
            try:
                extra = out.receive(timeout_millis=200)
            except pulsar.Timeout:
                return True
            got.append(extra.data())
            return False

        holds_for(more, 2.0, what="no output twice")
        status = as_json(standalone, "functions", "status", "--fqfn", "public/eo/flaky")
        assert status["instances"][0]["status"]["numRestarts"] >= 1
        state = as_json(
            standalone, "functions", "querystate", "--fqfn", "public/eo/flaky", "-k", "attempts"
        )
        assert state["numberValue"] == 2
        admin(standalone, "functions", "delete", "--fqfn", "public/eo/flaky")
        out.close()
