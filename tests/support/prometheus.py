"""A real Prometheus server for tests: Debian's ``prometheus`` package (scripts/setup.sh
installs it), started on a free loopback port with its own data directory and a scrape
config listing the ``/metrics`` endpoints under test, waited for (``/-/ready``) with a bounded
timeout and stopped by pid.

What the tests read comes through Prometheus' HTTP API (``/api/v1/...``), so a series
counts only once Prometheus has scraped and parsed it: the same path a dashboard or an
alert rule takes.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.procs import LOOPBACK, Proc, ServerProc, free_port
from tests.support.wait import wait_until

INSTALL_HINT = "prometheus is not installed (scripts/setup.sh installs Debian's prometheus)"


def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def prometheus_available() -> bool:
    return prometheus_binary() is not None


@dataclass(frozen=True)
class ScrapeTarget:
    """One scrape job: ``job`` names it (the ``job`` label of its series), ``address`` is
    ``host:port`` of a ``/metrics`` endpoint (plain HTTP)."""

    job: str
    address: str
    metrics_path: str = "/metrics"


def scrape_config(
    targets: Sequence[ScrapeTarget],
    *,
    interval_s: float,
    rule_files: Sequence[Path] = (),
    jobs: Sequence[Mapping[str, Any]] = (),
) -> str:
    """prometheus.yml for ``targets`` (JSON is YAML), scraped every ``interval_s``, and the
    scrape ``jobs`` given whole (e.g. Kubernetes discovery, tests/support/monitors.py); the
    rules of ``rule_files`` evaluated as often."""
    static = [
        {
            "job_name": t.job,
            "metrics_path": t.metrics_path,
            "static_configs": [{"targets": [t.address]}],
        }
        for t in targets
    ]
    interval = f"{int(interval_s * 1000)}ms"
    config = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "scrape_configs": [*static, *(dict(j) for j in jobs)],
    }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    return json.dumps(config, indent=2) + "\n"


class PrometheusServer(ServerProc):
    """``prometheus`` on 127.0.0.1 scraping ``targets`` every ``interval_s`` and the scrape
    ``jobs`` given whole (and evaluating the alert rules of ``rule_files`` as often)."""

    def __init__(
        self,
        base_dir: Path,
        targets: Sequence[ScrapeTarget],
        *,
        interval_s: float = 1.0,
        ready_timeout: float = 60.0,
        rule_files: Sequence[Path] = (),
        jobs: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError(INSTALL_HINT)
        base_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir = base_dir
        self.targets = tuple(targets)
        self.port = free_port()
        self.config_path = base_dir / "prometheus.yml"
        self.config_path.write_text(
            scrape_config(self.targets, interval_s=interval_s, rule_files=rule_files, jobs=jobs)
        )
        argv = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={base_dir / 'data'}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            # Debian's defaults point at its own copies under /usr/share; the API needs none
            f"--web.console.templates={base_dir}",
            f"--web.console.libraries={base_dir}",
            "--log.level=warn",
        ]
        self.proc = Proc(
            argv,
            log_path=base_dir / "prometheus.log",
            ready=self.ready,
            ready_timeout=ready_timeout,
        )

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def api(self, path: str, **params: str | Sequence[str]) -> Any:
        """GET ``/api/v1/{path}`` with ``params``; the ``data`` of a ``success`` answer
        (RuntimeError naming Prometheus' error otherwise)."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
                answer = json.loads(r.read())
        except urllib.error.HTTPError as err:
            answer = json.loads(err.read() or b"{}")
        if answer.get("status") != "success":
            raise RuntimeError(f"prometheus /api/v1/{path}: {answer.get('error', answer)}")
        return answer["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector (or other result) of ``promql`` now."""
        data = self.api("query", query=promql)
        return list(data["result"])

    def value(self, promql: str) -> float | None:
        """The value of a one-series result of ``promql`` (None when it has no series)."""
        result = self.query(promql)
        if not result:
            return None
        if len(result) > 1:
            raise AssertionError(f"{promql}: {len(result)} series, expected one")
        return float(result[0]["value"][1])

    def query_result(self, promql: str) -> tuple[str, Any]:
        """(resultType, result) of ``promql`` now: a vector's or matrix's series, or a
        scalar's ``[time, value]``."""
        data = self.api("query", query=promql)
        return str(data["resultType"]), data["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts of the rule engine now (``/api/v1/alerts``): labels, state (pending,
        firing), value."""
        return list(self.api("alerts")["alerts"])

    def firing(self, alertname: str) -> list[dict[str, str]]:
        """The label sets of ``alertname``'s firing alerts."""
        return [
            dict(a["labels"])
            for a in self.alerts()
            if a["labels"].get("alertname") == alertname and a["state"] == "firing"
        ]

    def rule_health(self) -> dict[str, str]:
        """Alert name -> its rule's health (``ok``, ``err``, ``unknown``) and last error."""
        out: dict[str, str] = {}
        for group in self.api("rules", type="alert")["groups"]:
            for rule in group["rules"]:
                out[rule["name"]] = rule["health"] + (
                    f": {rule['lastError']}" if rule.get("lastError") else ""
                )
        return out

    def active_targets(self) -> list[dict[str, Any]]:
        """Every active target (``/api/v1/targets``): its ``labels``, ``health``,
        ``lastError``, ``scrapePool``, ``scrapeUrl``, ``lastScrape``."""
        return list(self.api("targets", state="active")["activeTargets"])

    @staticmethod
    def scraped_at(target: dict[str, Any]) -> float:
        """When an active target (:meth:`active_targets`) was last scraped (epoch seconds;
        0 before the first)."""
        stamp = str(target.get("lastScrape") or "")
        return 0.0 if not stamp or stamp.startswith("0001-") else _parse_rfc3339(stamp)

    def targets_health(self) -> dict[str, str]:
        """``job`` -> health (``up``, ``down``, ``unknown``) of every active target."""
        data = self.api("targets", state="active")
        return {t["labels"]["job"]: t["health"] for t in data["activeTargets"]}

    def last_scrape(self, job: str) -> float:
        """When ``job``'s target was last scraped (epoch seconds; 0 before the first)."""
        data = self.api("targets", state="active")
        for t in data["activeTargets"]:
            if t["labels"]["job"] == job and t.get("lastScrape"):
                stamp: str = t["lastScrape"]
                if stamp.startswith("0001-"):
                    return 0.0
                return _parse_rfc3339(stamp)
        return 0.0

    def wait_scraped(self, jobs: Sequence[str] | None = None, *, timeout: float = 60.0) -> None:
        """Until every job in ``jobs`` (all, by default) was scraped successfully after this
        call began: what a workload did before is then in Prometheus."""
        want = list(jobs) if jobs is not None else [t.job for t in self.targets]
        since = time.time()

        def scraped() -> bool:
            health = self.targets_health()
            return all(health.get(j) == "up" and self.last_scrape(j) > since for j in want)

        try:
            wait_until(scraped, timeout=timeout, what=f"prometheus scraping {want}")
        except AssertionError:
            data = self.api("targets", state="active")
            errors = {t["labels"]["job"]: t.get("lastError") for t in data["activeTargets"]}
            raise TimeoutError(
                f"prometheus did not scrape {want} in {timeout}s: {errors}"
            ) from None

    def series(self, job: str) -> list[dict[str, str]]:
        """Every series Prometheus holds for ``job`` (its label sets, ``__name__``
        included)."""
        data = self.api("series", **{"match[]": f'{{job="{job}"}}'})
        return [dict(s) for s in data]

    def metadata(self, job: str) -> dict[str, str]:
        """Metric family name -> type (counter, gauge, histogram, summary, untyped) as
        ``job``'s target declared it."""
        data = self.api("targets/metadata", match_target=f'{{job="{job}"}}')
        return {m["metric"]: m["type"] for m in data}


def _parse_rfc3339(stamp: str) -> float:
    """Prometheus' ``lastScrape`` (RFC 3339 with nanoseconds and an offset)."""
    head, _, rest = stamp.partition(".")
    frac = ""
    tz = "Z"
    if rest:
        digits = ""
        for i, ch in enumerate(rest):
            if not ch.isdigit():
                tz = rest[i:]
                break
            digits += ch
        frac = "." + digits[:6]
    elif stamp.endswith("Z"):
        head = stamp[:-1]
    tz = "+00:00" if tz == "Z" else tz
    return datetime.fromisoformat(f"{head}{frac}{tz}").timestamp()
