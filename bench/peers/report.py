"""docs/benchmarks.md from a run's raw results (run.py keeps them in .cache/bench-peers/).

.venv/bin/python bench/peers/report.py .cache/bench-peers/results-....json [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any

ORDER = [
    "pulsar", "pulsar-lite", "magnetar", "magnetar-cluster", "magnetar-dedup", "pulsar-secured",
    "magnetar-secured",
]  # fmt: skip
CLUSTER = "magnetar-cluster"
"""Magnetar as etcd, three bookies and two brokers (systems.MagnetarCluster): compared with
the standalone and with Apache Pulsar, not as Magnetar's denominator."""
SECURED = {"pulsar-secured": "pulsar", "magnetar-secured": "magnetar"}
"""The systems with TLS + token authentication + authorization on, and their plaintext twin."""


def ratio_pairs(systems: list[str], info: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The ratio columns: (label, numerator, denominator). Magnetar against every other
    plaintext system; with the secured systems, Magnetar against Pulsar both secured, and
    what security costs each system (secured / plaintext)."""
    pairs = [
        (f"Magnetar / {info[s]['name']}", "magnetar", s)
        for s in systems
        if "magnetar" in systems and s not in ("magnetar", CLUSTER) and s not in SECURED
    ]
    if CLUSTER in systems:
        for other, label in (("magnetar", "Magnetar standalone"), ("pulsar", "Apache Pulsar")):
            if other in systems:
                pairs.append((f"Magnetar cluster / {label}", CLUSTER, other))
    if "magnetar-secured" in systems and "pulsar-secured" in systems:
        both = "Magnetar / Apache Pulsar, both TLS + token"
        pairs.append((both, "magnetar-secured", "pulsar-secured"))
    for secured, plain in SECURED.items():
        if secured in systems and plain in systems:
            pairs.append((f"{info[plain]['name']}: TLS + token / plaintext", secured, plain))
    return pairs


SERVER_CPU = ("server_cpu_us", "server CPU per published message, all its processes", "µs", False)
"""User + system CPU of every server process over the workload / the messages published in it
(run.py; for the cluster: etcd, bookies and brokers together)."""

# (workload, title, [(key, label, unit, higher_is_better)])
TABLES: list[tuple[str, str, list[tuple[str, str, str, bool]]]] = [
    (
        "w1",
        "Workload 1: one topic, 1 KiB messages, batching on (1 ms); max publish rate, then "
        "consume the whole backlog",
        [
            ("publish_msgs", "publish", "msg/s", True),
            ("publish_mbs", "publish", "MB/s", True),
            ("consume_msgs", "consume", "msg/s", True),
            SERVER_CPU,
        ],
    ),
    (
        "w1p",
        "Workload 1 with pulsar-perf (Apache Pulsar's Java load generator) instead of the "
        "Python client: one topic, 1 KiB, batching 1 ms, producer at its maximum rate and a "
        "consumer, together",
        [
            ("publish_msgs", "publish", "msg/s", True),
            ("publish_mbs", "publish", "MB/s", True),
            ("consume_msgs", "consume, while the producer ran", "msg/s", True),
            ("publish_p50_ms", "publish latency p50", "ms", False),
            ("publish_p99_ms", "publish latency p99", "ms", False),
            ("e2e_p50_ms", "end-to-end latency p50", "ms", False),
            ("e2e_p99_ms", "end-to-end latency p99", "ms", False),
            ("drained_s", "consumer had every message, after the producer's end", "s", False),
            SERVER_CPU,
        ],
    ),
    (
        "w2",
        "Workload 2: 100 B messages, batching off",
        [
            ("sync_p50_ms", "sync send p50 (1 outstanding)", "ms", False),
            ("sync_p99_ms", "sync send p99", "ms", False),
            ("sync_p999_ms", "sync send p99.9", "ms", False),
            ("outstanding_msgs", "max rate, 1,000 outstanding", "msg/s", True),
            SERVER_CPU,
        ],
    ),
    (
        "w3",
        "Workload 3: fan-out; 1 producer (1 KiB, batching 1 ms), 4 exclusive subscriptions "
        "+ 1 shared subscription with 4 consumers",
        [
            ("sustained_msgs", "sustained rate, all keep up", "msg/s", True),
            ("e2e_p50_ms", "end-to-end p50 at that rate", "ms", False),
            ("e2e_p99_ms", "end-to-end p99 at that rate", "ms", False),
            SERVER_CPU,
        ],
    ),
    (
        "w4",
        "Workload 4: catch-up; read a backlog from the earliest position while producing "
        "5,000 msg/s (1 KiB, batching 1 ms)",
        [
            ("drain_mbs", "drain", "MB/s", True),
            ("publish_p99_ms", "publish p99 during the drain", "ms", False),
            ("publish_p50_ms", "publish p50 during the drain", "ms", False),
            ("build_mbs", "backlog build (max-rate publish)", "MB/s", True),
            SERVER_CPU,
        ],
    ),
]


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"
    if unit == "s":
        return f"{v:.0f}"
    if unit == "µs":
        return f"{v:.1f}" if v < 10 else f"{v:,.0f}"
    if unit == "MB/s":
        return f"{v:.1f}" if v < 100 else f"{v:,.0f}"
    return f"{v:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def _runs(results: dict[str, Any], system: str, workload: str) -> list[dict[str, Any]]:
    return [r for r in results["runs"] if r["system"] == system and r["workload"] == workload]


def _limit(res: dict[str, Any]) -> str:
    """Why workload 3's ladder stopped, from its last step."""
    from workloads import _why

    ladder = res.get("ladder") or []
    if not ladder or ladder[-1]["ok"]:
        return "the ladder's top step kept up (the real limit is higher)"
    last = ladder[-1]
    return f"fell behind at {last['rate']:,} msg/s ({_why(last)})"


def medians(results: dict[str, Any], system: str, workload: str) -> dict[str, Any]:
    runs = _runs(results, system, workload)
    ok = [r["result"] for r in runs if "result" in r]
    out: dict[str, Any] = {"rounds_ok": len(ok), "rounds": len(runs)}
    out["errors"] = [r["error"] for r in runs if "error" in r]
    keys = {k for res in ok for k, v in res.items() if isinstance(v, int | float)}
    for k in keys:
        vals = [res[k] for res in ok if isinstance(res.get(k), int | float)]
        out[k] = statistics.median(vals) if vals else None
    out["notes"] = [res["note"] for res in ok if res.get("note")]
    out["limits"] = [_limit(res) for res in ok if res.get("limit")]
    return out


def _common_rate_row(
    results: dict[str, Any], systems: list[str], meds: dict[str, dict[str, Any]], add: Any
) -> None:
    """End-to-end p50 and p99 and the server's CPU per published message of every system at
    one rate, the highest all of them kept up with (the rows above compare each system at its
    own limit, and its CPU over the whole ladder). Ladders recorded before their steps kept
    the p50 or the CPU give the rows they have."""
    rates = [meds[s].get("sustained_msgs") for s in systems if meds[s]["rounds_ok"]]
    if len(rates) < 2 or not all(rates):
        return
    common = min(r for r in rates if r)
    pairs = ratio_pairs(systems, results["systems"])
    at = f"at {common:,} msg/s, a rate all kept up with"
    for key, label, unit in (
        ("p50_ms", f"end-to-end p50 {at} (ms, lower is better)", "ms"),
        ("p99_ms", f"end-to-end p99 {at} (ms, lower is better)", "ms"),
        (
            "server_cpu_us",
            f"server CPU per published message {at}, all its processes (µs, lower is better)",
            "µs",
        ),
    ):
        cells: dict[str, float | None] = {}
        for s in systems:
            vals = []
            for run in _runs(results, s, "w3"):
                for step in (run.get("result") or {}).get("ladder", []):
                    if step["rate"] == common and step["ok"] and step.get(key) is not None:
                        vals.append(step[key])
                        break
            cells[s] = statistics.median(vals) if vals else None
        if key != "p99_ms" and not any(v is not None for v in cells.values()):
            continue
        row = [_fmt(cells[s], unit) for s in systems]
        row += [_ratio(cells[a], cells[b]) for _, a, b in pairs]
        add(f"| {label} | " + " | ".join(row) + " |")


TARGETS: list[tuple[str, str, float]] = [
    # (workload, key, the ratio Magnetar / Apache Pulsar must reach: >= for a row where higher
    # is better, <= where lower is better)
    ("w1", "publish_msgs", 1.5),
    ("w1", "consume_msgs", 1.0),
    ("w1", "server_cpu_us", 0.5),
    ("w1p", "publish_msgs", 1.5),
    ("w1p", "consume_msgs", 1.5),
    ("w1p", "publish_p50_ms", 1.0),
    ("w1p", "publish_p99_ms", 1.0),
    ("w1p", "e2e_p50_ms", 1.0),
    ("w1p", "e2e_p99_ms", 1.0),
    ("w1p", "server_cpu_us", 0.5),
    ("w2", "sync_p50_ms", 1.0),
    ("w2", "sync_p99_ms", 1.0),
    ("w2", "sync_p999_ms", 1.0),
    ("w2", "outstanding_msgs", 1.5),
    ("w2", "server_cpu_us", 0.5),
    ("w3", "sustained_msgs", 1.0),
    ("w3", "e2e_p50_ms", 1.0),
    ("w3", "e2e_p99_ms", 1.0),
    ("w3", "server_cpu_us", 0.5),
    ("w4", "drain_mbs", 1.0),
    ("w4", "publish_p99_ms", 1.0),
    ("w4", "publish_p50_ms", 1.0),
    ("w4", "build_mbs", 1.0),
    ("w4", "server_cpu_us", 0.5),
]
"""Issue 24's targets: every row at least level with Apache Pulsar, W1 publish, W2's maximum
rate and w1p's rates 1.5x, and at most half Pulsar's server CPU per message."""


def targets(results: dict[str, Any], systems: list[str], add: Any, h2: str) -> None:
    """The targets table: each target row, its ratio Magnetar standalone / Apache Pulsar, met
    or not."""
    if not {"magnetar", "pulsar"} <= set(systems):
        return
    rows = {
        (w, k): (label, unit, higher) for w, _, spec in TABLES for k, label, unit, higher in spec
    }
    titles = {w: t.split(":", 1)[0] for w, t, _ in TABLES}
    titles["w1p"] = "Workload 1 with pulsar-perf"
    top = max(results["params"].get("w3_rates") or [0])
    lines: list[str] = []
    met = 0
    for w, key, goal in TARGETS:
        if w not in results["workloads"]:
            continue
        label, unit, higher = rows[(w, key)]
        mine, theirs = (medians(results, s, w) for s in ("magnetar", "pulsar"))
        a = mine.get(key) if mine["rounds_ok"] else None
        b = theirs.get(key) if theirs["rounds_ok"] else None
        if a is None or not b:
            verdict, shown = "not measured", "-"
        elif key == "sustained_msgs" and a == top and b == top:
            verdict, shown = "met (both at the ladder's top)", "-"
        else:
            ratio = a / b
            shown = f"{ratio:.2f}x"
            ok = ratio >= goal if higher else ratio <= goal
            verdict = "**met**" if ok else "not met"
        met += verdict.startswith(("**met", "met"))
        need = f"{'>=' if higher else '<='} {goal:.1f}x"
        lines.append(f"| {titles[w]} | {label} ({unit}) | {need} | {shown} | {verdict} |")
    if not lines:
        return
    add(f"{h2} Targets of issue 24: Magnetar standalone / Apache Pulsar, medians of this run")
    add("")
    add(f"{met} of {len(lines)} targets met.")
    add("")
    add("| workload | row | target | Magnetar / Apache Pulsar | met |")
    add("|---|---|---:|---:|---|")
    for line in lines:
        add(line)
    add("")


W1P_HOW = (
    "Workload w1p: `scripts/bench/pulsar-perf` (org.apache.pulsar:pulsar-testclient from "
    "Maven Central, bench/peers/pulsar-perf-pom.xml) runs `consume` (Exclusive subscription) "
    "and, once it is subscribed, `produce -s 1024 -r 10000000 -b 1 -o 10000 -time "
    "<w1 seconds>` on one topic, each in its own JVM. Rates come from pulsar-perf's "
    "timestamped log: publish = messages sent over the production window; consume = the "
    "consumer's rate over its 10-second report intervals inside that window; the drain row is "
    "when its first report showed every message (10 s resolution). Latencies are pulsar-perf's "
    "own aggregated histograms (publish: send to broker ack; end-to-end: publish time to "
    "receipt, one clock). A run counts only with no send failure, no ack failure, no "
    "ERROR/exception line and every message received; otherwise it is listed as failed."
)


def title_systems(names: list[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``: the systems a full run measured, for its title."""
    if len(names) < 2:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def render(results: dict[str, Any], section: str | None = None) -> str:
    """The whole docs/benchmarks.md, or with ``section`` only the block of a run of some
    workloads (put_section places it in the existing file)."""
    systems = [s for s in ORDER if s in results["systems"]]
    info = results["systems"]

    def head(s: str) -> str:
        return f"{info[s]['name']} {info[s].get('version', '')}".strip()

    m = results["machine"]
    c = results["ceilings"]
    p = results["params"]
    lines: list[str] = []
    add = lines.append
    h2 = "###" if section else "##"
    if section:
        wl = ",".join(results["workloads"])
        add(f"<!-- bench-peers section {section} begin -->")
        quick = " --quick" if results["quick"] else ""
        add(f"## Separate run: `bench/peers/run.py --workloads {wl}{quick}`")
        add("")
        add(
            "<!-- Generated by bench/peers/run.py; replaced by its next run of the same "
            "workloads, kept by a full run. Do not edit by hand. -->"
        )
        add("")
        add(
            f"> Not the run of the tables above: workloads {wl} only, "
            + (
                f"{results['rounds']} rounds, systems alternating; every figure is the median "
                "over the rounds."
                if results["rounds"] > 1
                else "1 round."
            )
            + " The machine may be shared with other work: compare the systems within this "
            "section, with its load averages in mind."
        )
    else:
        add(f"# Benchmarks: {title_systems([info[s]['name'] for s in systems])} side by side")
        add("")
        add(
            "<!-- Generated by bench/peers/run.py (make bench-peers / make bench-peers-quick); "
            "do not edit by hand. -->"
        )
    add("")
    if section:
        pass
    elif results["quick"]:
        add(
            "> **QUICK RUN** (`make bench-peers-quick`): 1 round, short phases "
            f"({p['w1_seconds']:.0f} s publish, {p['w2_sync_count']:,} sync sends, "
            f"{p['w3_step_seconds']:.0f} s fan-out steps, "
            f"{p['w4_backlog_bytes'] / 1024**2:,.0f} MiB backlog). A smoke run of the "
            "harness: the figures are indicative only. `make bench-peers` is the full run."
        )
    else:
        add(
            f"> Full run (`make bench-peers`): {results['rounds']} rounds, systems alternating; "
            "every figure is the median over the rounds."
        )
    if not section:
        add("")
    add(f"* Date: {results['started']} (UTC), finished {results.get('finished', '?')}")
    add(
        f"* Machine: {m['cores']} cores ({m['cpu'] or 'unknown CPU'}), {m['memory_gib']} GiB "
        f"memory, Linux {m['kernel']}; one machine for brokers and clients"
    )
    if set(results["workloads"]) - {"w1p"}:
        add(
            f"* Client: official `pulsar-client` {results['client']} (Python "
            f"{results['python']}), each load role in its own process; workload 1 with "
            f"{p.get('w1_publishers', 1)} publisher process(es)"
        )
    if results.get("pulsar_perf"):
        add(
            f"* Load generator of w1p: pulsar-perf (pulsar-testclient {results['pulsar_perf']}, "
            f"Java client), producer and consumer each in its own JVM, {p['w1_seconds']:.0f} s "
            "of production"
        )
    for s in systems:
        e = info[s]
        start = e.get("startup_s") or []
        add(
            f"* {head(s)}: install {e.get('install_s', 0):.1f} s (about 0 when cached), "
            f"startup {', '.join(f'{x:.1f}' for x in start) or '-'} s; 1-min load average "
            f"when it started: {', '.join(f'{x:.2f}' for x in e.get('loadavg', [])) or '-'}"
        )
    if set(systems) & set(SECURED):
        add(
            "* TLS + token: the secured systems take the same keys (tests/support/secured.py, "
            "as the security suites): TLS on the binary and HTTP ports with a certificate for "
            "`localhost` from a CA made for the run, the TLS, token and basic authentication "
            "providers, authorization on; the load generators connect to "
            "`pulsar+ssl://localhost` (hostname verified) with an HS256 token of role "
            "`bench`, a role granted produce and consume on public/default, not a super-user"
        )
    add(
        f"* Ceilings of this machine, same run: fsync {c['fsync']['ops']:,.0f} "
        f"write+fdatasync/s of 4 KiB ({c['fsync']['mbs']:.1f} MB/s, p50 "
        f"{c['fsync']['p50_ms']:.3f} ms, p99 {c['fsync']['p99_ms']:.3f} ms); loopback TCP "
        f"{c['loopback']['mbs']:,.0f} MB/s (one sender, one reader, 64 KiB writes)"
    )
    add("")
    failed = [(s, err) for s in systems for err in info[s].get("errors", [])]
    if failed:
        add(f"{h2} Systems that could not run")
        add("")
        for s, err in failed:
            first, *rest = err.splitlines()
            add(f"* **{info[s]['name']}**: {first}")
            if rest:
                add("")
                add("  ```")
                lines.extend(f"  {x}" for x in rest[-8:])
                add("  ```")
        add("")

    for w, title, rows in TABLES:
        if w not in results.get("workloads", [w]):
            continue
        add(f"{h2} {title}")
        add("")
        meds = {s: medians(results, s, w) for s in systems}
        cols = [head(s) for s in systems]
        pairs = ratio_pairs(systems, info)
        ratio_cols = [label for label, _, _ in pairs]
        add("| | " + " | ".join(cols + ratio_cols) + " |")
        add("|---|" + "---:|" * (len(cols) + len(ratio_cols)))
        for key, label, unit, higher in rows:
            cells = []
            for s in systems:
                md = meds[s]
                if md["rounds_ok"] == 0:
                    cells.append("not run" if not md["errors"] else "failed")
                    continue
                cell = _fmt(md.get(key), unit)
                top = max(p["w3_rates"]) if p.get("w3_rates") else None
                if key == "sustained_msgs" and md.get(key) == top:
                    cell = ">= " + cell  # the ladder's top: the real limit is higher
                if md["rounds_ok"] < md["rounds"]:
                    cell += f" ({md['rounds_ok']}/{md['rounds']} rounds)"
                cells.append(cell)
            ratios = []
            for _, a, b in pairs:
                mv = meds[a].get(key) if meds[a]["rounds_ok"] else None
                ov = meds[b].get(key) if meds[b]["rounds_ok"] else None
                r = _ratio(mv, ov) if unit != "s" else "-"  # s: 10 s resolution
                top = max(p["w3_rates"]) if p.get("w3_rates") else None
                if key == "sustained_msgs" and r != "-":
                    if ov == top and mv != top:
                        r = "<= " + r
                    elif mv == top and ov != top:
                        r = ">= " + r
                    elif mv == top and ov == top:
                        r = "-"
                ratios.append(r)
            better = "higher is better" if higher else "lower is better"
            add(f"| {label} ({unit}, {better}) | " + " | ".join(cells + ratios) + " |")
        if w == "w3":
            _common_rate_row(results, systems, meds, add)
        add("")
        if w == "w1p":
            add(W1P_HOW)
            add("")
            for s in systems:
                loads = [r["loadavg_end"] for r in _runs(results, s, w) if "loadavg_end" in r]
                if loads:
                    add(
                        f"* {info[s]['name']}: 1-min load average at the end of the workload: "
                        + ", ".join(f"{x:.2f}" for x in loads)
                    )
        for s in systems:
            md = meds[s]
            for err in dict.fromkeys(md["errors"]):
                add(f"* {info[s]['name']}: failed: {err}")
            for note in dict.fromkeys(md["notes"]):
                add(f"* {info[s]['name']}: {note}")
            if w == "w3":
                for lim in dict.fromkeys(md["limits"]):
                    add(f"* {info[s]['name']}: {lim}")
            for cpu_key, who in (
                ("publisher_cpu", "publisher"),
                ("consumer_cpu", "consumer"),
                ("outstanding_cpu", "publisher"),
            ):
                v = md.get(cpu_key)
                if isinstance(v, float) and v > 0.9:
                    add(
                        f"* {info[s]['name']}: the {who} process used {v:.0%} of a core: "
                        "the Python client, not the broker, may have been the limit"
                    )
        add("")
    targets(results, systems, add, h2)
    if section:
        add(f"<!-- bench-peers section {section} end -->")
        return "\n".join(lines) + "\n"
    add("## How it is measured")
    add("")
    add(
        "`make bench-peers` (full) or `make bench-peers-quick` runs `bench/peers/run.py`. It "
        "installs Apache Pulsar (bench/peers/pom.xml, `mvn dependency:copy-dependencies` into "
        ".cache/pulsar-<version>/lib by scripts/bench/install_pulsar.sh) and pulsar-lite (PyPI, "
        "its own venv .cache/pulsar-lite-venv, scripts/bench/install_pulsar_lite.sh), measures "
        "the machine's ceilings, then per round starts each system fresh on loopback ports "
        "picked at run time, warms it up (max-rate publishing to a topic of its own for "
        f"{p.get('warmup_seconds', 0):.0f} s, not measured), runs the four workloads against "
        "it and stops it by pid; the "
        "order of the systems rotates between rounds. Raw results (every round, the fan-out "
        "ladder, client CPU) are kept in .cache/bench-peers/results-*.json."
    )
    add("")
    add(
        "* Apache Pulsar: `org.apache.pulsar.PulsarStandaloneStarter` with bench/peers/"
        "standalone.conf (embedded bookie and RocksDB metadata store, "
        "`journalSyncData=true`, E = Wq = Aq = 1, everything on 127.0.0.1, functions worker "
        "and stream storage off), JVM `-Xms2g -Xmx2g -XX:MaxDirectMemorySize=2g`, G1."
    )
    add(
        "* pulsar-lite: its broker binary with `--config` (broker and metrics on 127.0.0.1). "
        "Its storage (RocksDB index + append-only entry logs) does not fsync before it "
        "acknowledges a publish; Pulsar and Magnetar do (journal fdatasync per group "
        "commit). Checked with strace on this machine: 1,000 sync sends cost about 1,000 "
        "fdatasync calls on Pulsar and on Magnetar, none on pulsar-lite. Publish figures are "
        "therefore not like for like."
    )
    add(
        "* Magnetar: `magnetar standalone --advertised-address 127.0.0.1 --bind-address "
        "127.0.0.1` from the project's venv, at the commit named in its column."
    )
    add(
        "* Magnetar cluster (`--systems ...,magnetar-cluster`): etcd, three `magnetar bookie` "
        "and two `magnetar broker` processes on loopback (tests/support's process classes), "
        "ledgers E3/Wq2/Aq2 (every entry on two bookies); the load generators connect to "
        "the first broker and lookups send each topic to its owner."
    )
    add(
        "* Server CPU per published message: user + system CPU time of every process of the "
        "system (their children included; for the cluster etcd, the bookies and the brokers) "
        "over the workload, read from /proc before and after it, divided by the messages "
        "published in it (W2: the sync sends and the max-rate phase; W3: every step of the "
        "ladder; W4: the backlog and the paced producer's)."
    )
    add(
        "* Load: every role (publisher, consumer, paced producer) is a separate process of "
        "bench/peers/loadgen.py with the official client, so no two share a GIL. Publishing "
        "uses `send_async` without a per-message Python callback (one would make the client "
        "the limit); latencies are histograms with 1% buckets merged across processes. "
        "Workload 3 steps its rate up a ladder "
        f"({', '.join(f'{r:,}' for r in p['w3_rates'])} msg/s, {p['w3_step_seconds']:.0f} s "
        "each, a fresh topic per step) until a subscription falls behind (not all messages "
        "delivered within 5 s of the producer's end, end-to-end p99 above 1 s, or the producer "
        "below 95% of the target; a failed step gets a second try). "
        "Workload 4 builds the backlog at max rate, then drains it through an existing "
        "subscription while a paced producer measures every publish's latency."
    )
    add(
        '* pulsar-perf (issue 11): `make bench-peers BENCH_PEERS_ARGS="--systems '
        'pulsar,magnetar --workloads w1p --rounds 1"` runs only workload 1 with pulsar-perf '
        "as the load generator (a few minutes) and writes its own section of this file, kept "
        "by a full run; `make bench-pulsar-perf` (bench/pulsar_perf_bench.py; "
        "`BENCH_ARGS=--record` records it here) produces and consumes 1 KiB for 60 s against a "
        "fresh Magnetar standalone and exits 1 on any error or missing message; "
        "`scripts/bench/pulsar-perf produce|consume -u pulsar://127.0.0.1:6650 ...` runs "
        "pulsar-perf by hand (installed on first use into .cache/pulsar-perf-<version>)."
    )
    add(
        "* The brokers and all client processes share the machine's "
        f"{m['cores']} cores: on a small machine the client's own CPU is part of every figure. "
        "The machine may also be shared with other work: the 1-min load average when each "
        "system started is listed above. Compare ratios from one run, not absolute numbers "
        "across machines."
    )
    add("")
    return "\n".join(lines)


_SECTION = re.compile(
    r"<!-- bench-peers section (\S+) begin -->\n.*?<!-- bench-peers section \1 end -->\n",
    re.S,
)


def sections(text: str) -> dict[str, str]:
    """The separate-run blocks of a docs/benchmarks.md, by name."""
    return {m[1]: m[0] for m in _SECTION.finditer(text)}


def add_record_option(ap: Any, default: Path) -> None:
    """The ``--record [FILE]`` option of a bench that writes its figures as a section."""
    ap.add_argument(
        "--record",
        nargs="?",
        const=str(default),
        metavar="FILE",
        help=f"also write the figures as a section of FILE (default {default.name})",
    )


def record_section(path: Path, name: str, block: str) -> None:
    """Write ``block`` as section ``name`` of ``path`` (replacing the previous one)."""
    old = path.read_text() if path.exists() else ""
    path.write_text(put_section(old, name, block) if old else block)
    print(f"recorded in {path}")


def merge_full(old: str, new: str) -> str:
    """A full run's page ``new`` with everything the old page ``old`` holds between its own
    full-run tables and "How it is measured" kept as it was: the separate runs' sections and
    the prose written around them (analyses, before/after figures of other issues)."""
    how = "\n## How it is measured"
    first = old.find("<!-- bench-peers section ")
    end = old.find(how)
    at = new.find(how)
    if first < 0 or end < first or at < 0:
        for name, block in sections(old).items():
            new = put_section(new, name, block)
        return new
    return new[: at + 1] + old[first : end + 1] + new[at + 1 :]


def put_section(text: str, name: str, block: str) -> str:
    """``text`` with the block ``name`` replaced by ``block``, or ``block`` added before
    "How it is measured" (or at the end)."""
    old = sections(text).get(name)
    if old is not None:
        return text.replace(old, block)
    at = text.find("\n## How it is measured")
    if at < 0:
        return text.rstrip("\n") + "\n\n" + block
    return text[: at + 1] + block + "\n" + text[at + 1 :]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("--out")
    args = ap.parse_args()
    text = render(json.loads(Path(args.results).read_text()))
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
