"""bench/peers/perf.py reads pulsar-perf's logs (issue 11): counts, rates from the log's
timestamps, failures and error lines; bench/peers/report.py puts a separate run's section into
docs/benchmarks.md without touching the rest. Pure parsing on fixed text: no process, no
timing."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "peers"))

import perf
import report

T = "2026-11-24T10:00:{:02d},000 INFO  [main] "

PRODUCE = "\n".join(
    [
        T.format(0) + "PerformanceProducer - Created 1 producers",
        T.format(10) + "PerformanceProducer - Throughput produced: 1000 msg --- 100.0 msg/s "
        "--- 0.8 Mbit/s  --- failure      0.0 msg/s --- Latency: mean: 5.0 ms - med: 4.0",
        T.format(20) + "PerformanceProducer - ------------- DONE (reached the maximum "
        "duration: [20 seconds] of production) --------------",
        T.format(30) + "PerformanceProducer - Aggregated throughput stats --- 2000 records sent "
        "--- 66.667 msg/s --- 0.5 Mbit/s ",
        T.format(30) + "PerformanceProducer - Aggregated latency stats --- Latency: mean:  "
        "5.000 ms - med:  4.000 - 95pct: 9.000 - 99pct: 12.000 - 99.9pct: 15.000 - 99.99pct: "
        "16.000 - 99.999pct: 17.000 - Max: 18.000",
    ]
)


def consume(received: int, ack_failed: int = 0, extra: str = "") -> str:
    return "\n".join(
        [
            T.format(0) + "PerformanceConsumer - Start receiving from 1 consumers",
            T.format(5) + "PerformanceConsumer - Throughput received: 400 msg --- 80 msg/s",
            T.format(15) + "PerformanceConsumer - Throughput received: 1400 msg --- 100 msg/s",
            T.format(25) + f"PerformanceConsumer - Throughput received: {received} msg --- 60",
            extra,
            T.format(26) + f"PerformanceConsumer - Aggregated throughput stats --- {received} "
            "records received --- 76.9 msg/s --- 0.6 Mbit/s --- AckRate: 76.9  msg/s --- ack "
            f"failed {ack_failed} msg",
            T.format(26) + "PerformanceConsumer - Aggregated latency stats --- Latency: mean: "
            "7.0 ms - med: 6 - 95pct: 10 - 99pct: 20 - 99.9pct: 30 - 99.99pct: 31 - Max: 32",
        ]
    )


def test_a_clean_run_is_ok_and_its_rates_come_from_the_timestamps() -> None:
    run = perf.parse(PRODUCE, consume(2000))
    assert run.ok
    assert (run.sent, run.received, run.ack_failures) == (2000, 2000, 0)
    assert run.window_s == 20.0
    assert run.send_rate == 100.0  # not pulsar-perf's 66.667, which counts the idle tail
    # the consumer's reports inside the window (producer start -> 5 s -> 15 s), not the drain
    assert run.receive_rate == 1400 / 15
    assert run.drained_s == 5.0
    assert run.publish_latency_ms == {
        "mean": 5.0,
        "p50": 4.0,
        "p95": 9.0,
        "p99": 12.0,
        "p999": 15.0,
    }
    assert run.e2e_latency_ms["p99"] == 20.0


def test_missing_messages_ack_failures_and_error_lines_fail_the_run() -> None:
    assert not perf.parse(PRODUCE, consume(1999)).ok
    assert not perf.parse(PRODUCE, consume(2000, ack_failed=3)).ok
    exc = (
        T.format(24) + "ERROR [pulsar-client-io-1-1] ConsumerImpl - java.lang.IllegalStateException"
    )
    run = perf.parse(PRODUCE, consume(2000, extra=exc))
    assert not run.ok
    assert run.problems and "IllegalStateException" in run.problems[0]
    failing = PRODUCE.replace("failure      0.0 msg/s", "failure     12.5 msg/s")
    assert perf.parse(failing, consume(2000)).failure_rate_max == 12.5
    assert not perf.parse(failing, consume(2000)).ok
    assert not perf.parse("", consume(2000)).ok  # no producer summary


def test_a_separate_run_replaces_only_its_own_section() -> None:
    doc = "# Benchmarks\n\n## Workload 1\n\ntable\n\n## How it is measured\n\ntext\n"

    def block(name: str, body: str) -> str:
        return (
            f"<!-- bench-peers section {name} begin -->\n{body}\n"
            f"<!-- bench-peers section {name} end -->\n"
        )

    once = report.put_section(doc, "w1p", block("w1p", "first"))
    assert once.index("first") < once.index("## How it is measured")
    assert "table" in once
    twice = report.put_section(once, "w1p", block("w1p", "second"))
    assert "first" not in twice and twice.count("section w1p begin") == 1
    both = report.put_section(twice, "check", block("check", "other"))
    assert set(report.sections(both)) == {"w1p", "check"}


def test_secured_systems_get_their_own_ratio_columns() -> None:
    info = {
        k: {"name": n}
        for k, n in (
            ("pulsar", "Apache Pulsar"),
            ("magnetar", "Magnetar"),
            ("pulsar-secured", "Apache Pulsar (TLS + token)"),
            ("magnetar-secured", "Magnetar (TLS + token)"),
        )
    }
    pairs = report.ratio_pairs(list(info), info)
    assert [(a, b) for _, a, b in pairs] == [
        ("magnetar", "pulsar"),
        ("magnetar-secured", "pulsar-secured"),
        ("pulsar-secured", "pulsar"),
        ("magnetar-secured", "magnetar"),
    ]
    assert pairs[2][0] == "Apache Pulsar: TLS + token / plaintext"


def test_pulsar_perf_takes_the_secured_systems_credentials() -> None:
    assert perf.client_args({"url": "pulsar://127.0.0.1:6650"}) == ()
    args = perf.client_args(
        {"url": "pulsar+ssl://localhost:6651", "tls_trust_certs": "/ca.pem", "token": "t"}
    )
    assert args == (
        "--trust-cert-file", "/ca.pem", "--tls-enable-hostname-verification",
        "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "--auth-params", "token:t",
    )  # fmt: skip


def test_a_full_run_keeps_the_sections_and_the_prose_between_them() -> None:
    old = (
        "# Benchmarks\n\n## Workload 1\n\nold table\n\n"
        "<!-- bench-peers section w1p begin -->\nw1p block\n<!-- bench-peers section w1p end -->\n"
        "\n**An analysis** written by hand.\n\n## How it is measured\n\nold how\n"
    )
    new = "# Benchmarks\n\n## Workload 1\n\nnew table\n\n## How it is measured\n\nnew how\n"
    merged = report.merge_full(old, new)
    assert "new table" in merged and "old table" not in merged
    assert "w1p block" in merged and "**An analysis** written by hand." in merged
    assert merged.index("new table") < merged.index("w1p block") < merged.index("new how")
    assert "old how" not in merged
    assert report.merge_full("", new) == new


def test_the_targets_table_judges_each_row_by_its_direction() -> None:
    def run(system: str, **res: float) -> dict[str, object]:
        return {"round": 0, "system": system, "workload": "w2", "result": res}

    results = {
        "workloads": ["w2"],
        "params": {"w3_rates": [1000]},
        "runs": [
            run(
                "pulsar",
                sync_p50_ms=2.0,
                sync_p99_ms=4.0,
                outstanding_msgs=40_000,
                server_cpu_us=40.0,
            ),
            run(
                "magnetar",
                sync_p50_ms=1.0,
                sync_p99_ms=5.0,
                outstanding_msgs=70_000,
                server_cpu_us=30.0,
            ),
        ],
    }
    lines: list[str] = []
    report.targets(results, ["pulsar", "magnetar"], lines.append, "##")
    rows = {line.split(" | ")[1]: line for line in lines if line.startswith("| Workload 2")}
    assert rows["sync send p50 (1 outstanding) (ms)"].endswith("| 0.50x | **met** |")
    assert rows["sync send p99 (ms)"].endswith("| 1.25x | not met |")
    assert rows["max rate, 1,000 outstanding (msg/s)"].endswith("| 1.75x | **met** |")
    assert (
        "| <= 0.5x | 0.75x | not met |"
        in rows["server CPU per published message, all its processes (µs)"]
    )
    assert "2 of 5 targets met." in lines
    none: list[str] = []
    report.targets(results, ["magnetar"], none.append, "##")
    assert none == []


def test_a_full_run_is_titled_by_the_systems_it_measured() -> None:
    assert report.title_systems(["Apache Pulsar"]) == "Apache Pulsar"
    assert report.title_systems(["Apache Pulsar", "Magnetar"]) == "Apache Pulsar and Magnetar"
    assert (
        report.title_systems(["Apache Pulsar", "Magnetar", "Magnetar cluster"])
        == "Apache Pulsar, Magnetar and Magnetar cluster"
    )


def test_w3_latencies_are_also_compared_at_the_rate_every_system_kept_up_with() -> None:
    """A system that sustains a higher step is measured there; the common-rate rows put the
    systems side by side at the highest step all of them kept up with: p50, p99 and the
    server's CPU per message in that step (a ladder recorded before its steps kept their p50
    or CPU gives the rows it has)."""

    def run(system: str, ladder: list[dict[str, object]], best: int) -> dict[str, object]:
        return {
            "round": 0,
            "system": system,
            "workload": "w3",
            "result": {"sustained_msgs": best, "ladder": ladder},
        }

    def step(rate: int, ok: bool, p50: float, p99: float, cpu: float) -> dict[str, object]:
        return {"rate": rate, "ok": ok, "p50_ms": p50, "p99_ms": p99, "server_cpu_us": cpu}

    info = {"pulsar": {"name": "Apache Pulsar"}, "magnetar": {"name": "Magnetar"}}
    results = {
        "systems": info,
        "runs": [
            run(
                "pulsar",
                [step(1000, True, 10.0, 60.0, 40.0), step(2000, False, 90.0, 900.0, 20.0)],
                1000,
            ),
            run(
                "magnetar",
                [step(1000, True, 4.0, 30.0, 12.0), step(2000, True, 80.0, 200.0, 30.0)],
                2000,
            ),
        ],
    }
    systems = ["pulsar", "magnetar"]
    meds = {s: report.medians(results, s, "w3") for s in systems}
    lines: list[str] = []
    report._common_rate_row(results, systems, meds, lines.append)
    assert lines == [
        "| end-to-end p50 at 1,000 msg/s, a rate all kept up with (ms, lower is better) "
        "| 10.0 | 4.00 | 0.40x |",
        "| end-to-end p99 at 1,000 msg/s, a rate all kept up with (ms, lower is better) "
        "| 60.0 | 30.0 | 0.50x |",
        "| server CPU per published message at 1,000 msg/s, a rate all kept up with, all its "
        "processes (µs, lower is better) | 40 | 12 | 0.30x |",
    ]
    for r in results["runs"]:  # type: ignore[attr-defined]
        for s in r["result"]["ladder"]:
            s.pop("p50_ms")
            s.pop("server_cpu_us")
    older: list[str] = []
    report._common_rate_row(results, systems, meds, older.append)
    assert older == lines[1:2]
