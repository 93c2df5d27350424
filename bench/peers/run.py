"""Side-by-side benchmarks: Apache Pulsar standalone, pulsar-lite and Magnetar standalone,
the same workloads through the official ``pulsar-client`` on the same machine in one run
(issue 7). Regenerates docs/benchmarks.md.

    .venv/bin/python bench/peers/run.py            # full: 3 rounds, 30 s phases, 2 GiB backlog
    .venv/bin/python bench/peers/run.py --quick    # 1 round, short phases, small backlog
    .venv/bin/python bench/peers/run.py --systems pulsar,magnetar --workloads w1p --rounds 1
                                                   # workload 1 with pulsar-perf (minutes)

Each round starts every system fresh (empty data directory, loopback ports picked at run
time), runs workloads 1-4 against it and stops it; the systems' order rotates from round to
round. The report gives each figure's median over the rounds. A system that cannot be
installed or started is reported with the reason, never skipped silently.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ceilings
import perf
import report
import systems
import workloads

ROOT = systems.ROOT
FULL = ("w1", "w2", "w3", "w4")


def quick_params() -> workloads.Params:
    return workloads.Params(
        warmup_seconds=3.0,
        w1_seconds=5.0,
        w2_sync_count=2000,
        w2_seconds=5.0,
        w3_step_seconds=3.0,
        w3_rates=(1000, 2000, 4000, 8000, 16000, 32000),
        w4_backlog_bytes=128 * 1024**2,
        w4_timeout=300.0,
    )


def log(msg: str) -> None:
    print(f"[bench-peers {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _client_version() -> str:
    try:
        import importlib.metadata as md

        return md.version("pulsar-client")
    except Exception:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short phases, 1 round, small backlog")
    ap.add_argument("--rounds", type=int, help="rounds (default 3, quick 1)")
    ap.add_argument(
        "--systems",
        default="pulsar,pulsar-lite,magnetar",
        help="comma-separated subset of pulsar,pulsar-lite,magnetar (default), "
        "magnetar-dedup (deduplication on for every topic), and pulsar-secured, "
        "magnetar-secured (TLS + token authentication + authorization on)",
    )
    ap.add_argument(
        "--workloads",
        default=",".join(FULL),
        help="comma-separated subset of w1,w2,w3,w4 (default) and w1p (workload 1 with "
        "pulsar-perf as the load generator). A run of anything but all four writes its own "
        "section into --out and leaves the rest of it alone",
    )
    ap.add_argument("--w1-publishers", type=int, default=1, help="publisher processes, w1")
    ap.add_argument("--backlog-mb", type=int, help="workload 4 backlog (MiB)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--no-report", action="store_true", help="print results, leave docs alone")
    args = ap.parse_args()

    params = quick_params() if args.quick else workloads.Params()
    params.w1_publishers = args.w1_publishers
    if args.backlog_mb:
        params.w4_backlog_bytes = args.backlog_mb * 1024**2
    rounds = args.rounds or (1 if args.quick else 3)
    keys = [k.strip() for k in args.systems.split(",") if k.strip()]
    wls = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for k in keys:
        if k not in systems.ALL:
            ap.error(f"unknown system {k!r}")
    for w in wls:
        if w not in workloads.WORKLOADS:
            ap.error(f"unknown workload {w!r}")

    # SIGTERM (make interrupted, CI timeout) unwinds through the finally blocks below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    cache = ROOT / ".cache" / "bench-peers"
    cache.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=cache))
    started = dt.datetime.now(dt.UTC)
    results: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "quick": args.quick,
        "rounds": rounds,
        "params": asdict(params),
        "workloads": wls,
        "machine": ceilings.machine(),
        "python": platform.python_version(),
        "client": _client_version(),
        "pulsar_perf": perf.version() if "w1p" in wls else None,
        "systems": {},
        "runs": [],
    }
    log(f"work dir {workdir}")

    # Ceilings first, on an idle machine, on the disk the brokers write to.
    secs = 2.0 if args.quick else 5.0
    log("ceilings: fsync (4 KiB write + fdatasync) and loopback TCP")
    results["ceilings"] = {
        "fsync": ceilings.fsync_ceiling(workdir, secs),
        "loopback": ceilings.loopback_ceiling(secs),
    }
    log(f"ceilings: {json.dumps(results['ceilings'])}")

    # Install every system once (cached after the first time).
    insts: dict[str, systems.System] = {}
    for k in keys:
        sysobj = systems.ALL[k](workdir)
        entry: dict[str, Any] = {"name": sysobj.name, "errors": [], "startup_s": []}
        results["systems"][k] = entry
        log(f"{sysobj.name}: install")
        try:
            sysobj.install()
            insts[k] = sysobj
        except systems.StartError as err:
            entry["errors"].append(f"could not install: {err}")
            log(f"{sysobj.name}: could not install: {err}")
        except Exception as err:  # a broken install is a reason, not a crash
            entry["errors"].append(f"could not install: {err!r}")
            log(f"{sysobj.name}: could not install: {err!r}")
        entry["version"] = sysobj.version
        entry["install_s"] = round(sysobj.install_seconds, 1)

    try:
        for r in range(rounds):
            order = keys[r % len(keys) :] + keys[: r % len(keys)]
            for k in order:
                sysobj_ = insts.get(k)
                if sysobj_ is None:
                    continue
                run_system(sysobj_, k, r, wls, params, results)
                _save(cache, results)
    finally:
        for s in insts.values():
            s.stop()

    results["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    path = _save(cache, results)
    log(f"raw results: {path}")
    # A run of all four workloads (and maybe w1p) regenerates the file's own tables, keeping the
    # separate-run sections and the prose around them; any other set of workloads only
    # replaces its own section in it.
    out = Path(args.out)
    old = out.read_text() if out.exists() else ""
    if set(FULL) <= set(wls):
        text = report.merge_full(old, report.render(results))
    else:
        secured = "-secured" if set(keys) & set(report.SECURED) else ""
        name = "-".join(wls) + secured + ("-quick" if args.quick else "")
        section = report.render(results, section=name)
        text = report.put_section(old, name, section) if old else section
    if args.no_report:
        print(text)
    else:
        out.write_text(text)
        log(f"wrote {args.out}")
    # The work dir keeps only the systems' logs now (data dirs go when a system stops).
    log(f"system logs: {workdir}")
    return 0


def run_system(
    s: systems.System,
    key: str,
    rnd: int,
    wls: list[str],
    params: workloads.Params,
    results: dict[str, Any],
) -> None:
    entry = results["systems"][key]
    log(f"round {rnd + 1}: {s.name}: start")
    try:
        url = s.start()
    except systems.StartError as err:
        entry["errors"].append(f"could not start: {err}")
        log(f"round {rnd + 1}: {s.name}: could not start: {err}")
        return
    except Exception as err:
        entry["errors"].append(f"could not start: {err!r}")
        log(f"round {rnd + 1}: {s.name}: could not start: {err!r}")
        s.stop()
        return
    entry["startup_s"].append(round(s.startup_seconds, 1))
    # The machine may be shared: keep its load next to the figures.
    entry.setdefault("loadavg", []).append(round(os.getloadavg()[0], 2))
    log(f"round {rnd + 1}: {s.name}: up at {url} in {s.startup_seconds:.1f} s (pid {s.pid()})")
    prefix = f"r{rnd}-{int(time.time())}"
    try:
        try:
            workloads.warmup(s.conn(), prefix, params)
        except Exception as err:
            log(f"round {rnd + 1}: {s.name}: warm-up failed: {err}")
        for w in wls:
            if not s.alive():
                msg = f"{s.name} exited (status {s.proc.returncode if s.proc else '?'})"
                results["runs"].append({"round": rnd, "system": key, "workload": w, "error": msg})
                log(f"round {rnd + 1}: {s.name}: {w}: {msg}")
                continue
            t0 = time.monotonic()
            log(f"round {rnd + 1}: {s.name}: {w}")
            try:
                cpu0 = s.cpu_seconds()
                run = workloads.WORKLOADS[w]
                if w in workloads.STEPPED:
                    res = run(s.conn(), prefix, params, cpu=s.cpu_seconds)
                else:
                    res = run(s.conn(), prefix, params)
                # Server CPU per message published in the workload, over all the system's
                # processes: the speed must come from parallelism, not from burning more.
                if res.get("server_msgs"):
                    res["server_cpu_us"] = (s.cpu_seconds() - cpu0) / res["server_msgs"] * 1e6
                results["runs"].append(
                    {
                        "round": rnd,
                        "system": key,
                        "workload": w,
                        "result": res,
                        "seconds": round(time.monotonic() - t0, 1),
                        "loadavg_end": round(os.getloadavg()[0], 2),
                    }
                )
                shown = {k: v for k, v in res.items() if not isinstance(v, list | dict)}
                log(f"round {rnd + 1}: {s.name}: {w}: {json.dumps(shown, default=str)}")
            except Exception as err:
                detail = str(err) if isinstance(err, workloads.WorkloadError) else repr(err)
                results["runs"].append(
                    {"round": rnd, "system": key, "workload": w, "error": detail}
                )
                log(f"round {rnd + 1}: {s.name}: {w} failed: {detail}")
                if not isinstance(err, workloads.WorkloadError):
                    traceback.print_exc()
    finally:
        s.stop()
        log(f"round {rnd + 1}: {s.name}: stopped")


def _save(cache: Path, results: dict[str, Any]) -> Path:
    stamp = results["started"].replace(":", "").replace("-", "")
    path = cache / f"results-{stamp}{'-quick' if results['quick'] else ''}.json"
    path.write_text(json.dumps(results, indent=1, default=str))
    return path


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
