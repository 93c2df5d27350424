"""What the admin API asks of whatever runs function instances, and the answers' shapes.

A runtime (the standalone's :class:`magnetar.functions.supervisor.Supervisor`;
:class:`magnetar.functions.kubernetes.KubernetesRuntime`, Function resources, for
``magnetar broker --functions-runtime kubernetes``) says, per instance, whether it runs,
why not, how often it was restarted and the instance's last metrics report
(:mod:`.instance` writes it).
:func:`status` and :func:`stats` turn that into Pulsar's ``FunctionStatus`` and
``FunctionStatsImpl`` JSON (field names as in Pulsar 4.0.7's classes, ``1min`` included).
A broker with no runtime answers every instance as not running, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from magnetar.functions.config import FunctionName

NO_RUNTIME: Final = (
    "no function runtime on this broker: instances run in magnetar standalone, or on "
    "Kubernetes as a Function resource (whose status the resource itself shows)"
)


@dataclass(frozen=True, slots=True)
class InstanceState:
    running: bool
    error: str = ""
    restarts: int = 0
    worker_id: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    """The instance's last metrics report (empty before its first)."""
    counted: bool = True
    """False where this broker does not collect the instance's counters (a pod on
    Kubernetes): its status then shows them as null, not as zeros."""


class Runtime(Protocol):
    stats_unavailable: str | None
    """Why the instances' counters are not known here (stats are refused saying so, no
    ``pulsar_function_*`` series), or None when the reports are read."""

    def instances(self, name: FunctionName, parallelism: int) -> dict[int, InstanceState]:
        """The state of each instance 0..parallelism-1 of the function."""


class NoRuntime:
    """A broker that runs no instances: each one is reported not running, with the reason."""

    stats_unavailable: str | None = None

    def instances(self, name: FunctionName, parallelism: int) -> dict[int, InstanceState]:
        return {i: InstanceState(running=False, error=NO_RUNTIME) for i in range(parallelism)}


def _count(report: dict[str, Any], key: str) -> int:
    return int(report.get(key, 0))


def _latency(report: dict[str, Any]) -> float | None:
    processed = _count(report, "processed") + _count(report, "userExceptions")
    if not processed:
        return None
    return float(report.get("latencySumMs", 0.0)) / processed


def instance_status(state: InstanceState) -> dict[str, Any]:
    """Pulsar's ``FunctionInstanceStatusData``."""
    report = state.report
    counters: dict[str, Any] = {
        "numReceived": _count(report, "received"),
        "numSuccessfullyProcessed": _count(report, "processed"),
        "numUserExceptions": _count(report, "userExceptions"),
        "latestUserExceptions": list(report.get("latestUserExceptions", [])),
        "numSystemExceptions": _count(report, "systemExceptions"),
        "latestSystemExceptions": list(report.get("latestSystemExceptions", [])),
        "averageLatency": _latency(report) or 0.0,
        "lastInvocationTime": int(report.get("lastInvocation") or 0),
    }
    if not state.counted:  # unknown here: null, never a zero that claims nothing was done
        counters = dict.fromkeys(counters)
    return {
        "running": state.running,
        "error": state.error,
        "numRestarts": state.restarts,
        **counters,
        "workerId": state.worker_id,
    }


def status(states: dict[int, InstanceState]) -> dict[str, Any]:
    """Pulsar's ``FunctionStatus``."""
    return {
        "numInstances": len(states),
        "numRunning": sum(1 for s in states.values() if s.running),
        "instances": [
            {"instanceId": i, "status": instance_status(s)} for i, s in sorted(states.items())
        ],
    }


def _base(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "receivedTotal": _count(report, "received"),
        "processedSuccessfullyTotal": _count(report, "processed"),
        "systemExceptionsTotal": _count(report, "systemExceptions"),
        "userExceptionsTotal": _count(report, "userExceptions"),
        "avgProcessLatency": _latency(report),
    }


def instance_stats(state: InstanceState) -> dict[str, Any]:
    """Pulsar's ``FunctionInstanceStatsDataImpl``."""
    report = state.report
    return {
        **_base(report),
        "1min": _base(report.get("oneMin", {})),
        "lastInvocation": report.get("lastInvocation"),
        "userMetrics": {
            name: float(m["sum"]) / max(int(m["count"]), 1)
            for name, m in report.get("userMetrics", {}).items()
        },
    }


def _total(parts: list[dict[str, Any]]) -> dict[str, Any]:
    total = {
        k: sum(p[k] for p in parts)
        for k in (
            "receivedTotal",
            "processedSuccessfullyTotal",
            "systemExceptionsTotal",
            "userExceptionsTotal",
        )
    }
    latencies = [
        (p["avgProcessLatency"], p["processedSuccessfullyTotal"] + p["userExceptionsTotal"])
        for p in parts
        if p["avgProcessLatency"] is not None
    ]
    weight = sum(n for _, n in latencies)
    total["avgProcessLatency"] = sum(avg * n for avg, n in latencies) / weight if weight else None
    return total


def stats(states: dict[int, InstanceState]) -> dict[str, Any]:
    """Pulsar's ``FunctionStatsImpl``: the instances' sums, and each instance's."""
    ordered = sorted(states.items())
    metrics = [instance_stats(s) for _, s in ordered]
    pairs = zip(ordered, metrics, strict=True)
    instances = [{"instanceId": i, "metrics": m} for (i, _), m in pairs]
    invocations = [m["lastInvocation"] for m in metrics if m["lastInvocation"] is not None]
    return {
        **_total(metrics),
        "1min": _total([m["1min"] for m in metrics]),
        "lastInvocation": max(invocations) if invocations else None,
        "instances": instances,
    }


_COUNTERS: Final = (
    ("received_total", "received"),
    ("processed_successfully_total", "processed"),
    ("system_exceptions_total", "systemExceptions"),
    ("user_exceptions_total", "userExceptions"),
)
_ONE_MINUTE: Final = (
    ("received_1min", "received"),
    ("processed_successfully_1min", "processed"),
    ("system_exceptions_1min", "systemExceptions"),
    ("user_exceptions_1min", "userExceptions"),
)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _metric_name(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def prometheus(cluster: str, functions: list[tuple[FunctionName, dict[int, InstanceState]]]) -> str:
    """The instances' series in Pulsar's names (``pulsar_function_*``, labels ``tenant``,
    ``namespace``, ``name``, ``instance_id``, ``cluster``, ``fqfn``) as Prometheus text."""
    samples: dict[str, list[str]] = {}

    def add(metric: str, labels: str, value: float) -> None:
        text = str(int(value)) if float(value).is_integer() else repr(float(value))
        samples.setdefault(metric, []).append(f"{metric}{{{labels}}} {text}")

    for name, states in functions:
        for instance, state in sorted(states.items()):
            labels = ",".join(
                f'{k}="{_label(v)}"'
                for k, v in (
                    ("tenant", name.tenant),
                    ("namespace", f"{name.tenant}/{name.namespace}"),
                    ("name", name.name),
                    ("instance_id", str(instance)),
                    ("cluster", cluster),
                    ("fqfn", name.fqfn),
                )
            )
            report = state.report
            for metric, key in _COUNTERS:
                add(f"pulsar_function_{metric}", labels, _count(report, key))
            one_min = report.get("oneMin", {})
            for metric, key in _ONE_MINUTE:
                add(f"pulsar_function_{metric}", labels, _count(one_min, key))
            latency = "pulsar_function_process_latency_ms"
            done = _count(report, "processed") + _count(report, "userExceptions")
            add(f"{latency}_sum", labels, float(report.get("latencySumMs", 0.0)))
            add(f"{latency}_count", labels, done)
            add("pulsar_function_last_invocation", labels, int(report.get("lastInvocation") or 0))
            for user, m in report.get("userMetrics", {}).items():
                base = f"pulsar_function_user_metric_{_metric_name(user)}"
                add(f"{base}_sum", labels, float(m["sum"]))
                add(f"{base}_count", labels, float(m["count"]))
    lines = []
    for metric, rows in samples.items():
        if metric.endswith(("_sum", "_count")):
            family = metric.rsplit("_", 1)[0]
            if metric.endswith("_sum"):
                lines.append(f"# TYPE {family} summary")
        elif metric.endswith(("_total", "_1min")):
            lines.append(f"# TYPE {metric} {'counter' if metric.endswith('_total') else 'gauge'}")
        else:
            lines.append(f"# TYPE {metric} gauge")
        lines.extend(rows)
    return "\n".join(lines) + ("\n" if lines else "")
