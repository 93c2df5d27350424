"""Status and stats in Pulsar's shapes (the fields of Pulsar 4.0.7's FunctionStatus,
FunctionInstanceStatusData, FunctionStatsImpl and FunctionInstanceStatsDataImpl) from the
instances' metrics reports, and an honest answer from a broker that runs no instances."""

from __future__ import annotations

from prometheus_client import parser

from magnetar.functions import runtime
from magnetar.functions.config import FunctionName
from magnetar.functions.runtime import InstanceState

REPORT = {
    "received": 4,
    "processed": 3,
    "userExceptions": 1,
    "systemExceptions": 0,
    "latencySumMs": 8.0,
    "lastInvocation": 1700000000000,
    "latestUserExceptions": [{"exceptionString": "ValueError: x", "timestampMs": 1}],
    "userMetrics": {"size": {"sum": 10.0, "count": 4}},
    "oneMin": {"received": 2, "processed": 2, "latencySumMs": 2.0},
}


def test_status_shape() -> None:
    states = {
        0: InstanceState(running=True, worker_id="w", report=REPORT),
        1: InstanceState(running=False, error="exited with code 1: boom", restarts=2),
    }
    status = runtime.status(states)
    assert status["numInstances"] == 2 and status["numRunning"] == 1
    first = status["instances"][0]["status"]
    assert first["numReceived"] == 4 and first["numUserExceptions"] == 1
    assert first["averageLatency"] == 2.0
    assert first["latestUserExceptions"][0]["exceptionString"] == "ValueError: x"
    second = status["instances"][1]["status"]
    assert second["running"] is False and second["numRestarts"] == 2
    assert second["error"].startswith("exited with code 1")
    assert second["lastInvocationTime"] == 0


def test_uncounted_instances_show_null_counters() -> None:
    """A pod's counters are not collected by the broker: null, never zeros claiming nothing
    was received."""
    pod = runtime.instance_status(InstanceState(running=True, worker_id="fn-0", counted=False))
    assert pod["running"] is True and pod["workerId"] == "fn-0"
    assert pod["numReceived"] is None and pod["numSuccessfullyProcessed"] is None
    assert pod["averageLatency"] is None and pod["lastInvocationTime"] is None


def test_stats_shape_sums_instances() -> None:
    states = {i: InstanceState(running=True, report=REPORT) for i in range(2)}
    stats = runtime.stats(states)
    assert list(stats) == [
        "receivedTotal", "processedSuccessfullyTotal", "systemExceptionsTotal",
        "userExceptionsTotal", "avgProcessLatency", "1min", "lastInvocation", "instances",
    ]  # fmt: skip
    assert stats["receivedTotal"] == 8 and stats["userExceptionsTotal"] == 2
    assert stats["avgProcessLatency"] == 2.0
    assert stats["1min"]["receivedTotal"] == 4 and stats["1min"]["avgProcessLatency"] == 1.0
    metrics = stats["instances"][1]["metrics"]
    assert stats["instances"][1]["instanceId"] == 1
    assert metrics["userMetrics"] == {"size": 2.5}
    empty = runtime.stats({0: InstanceState(running=False)})
    assert empty["avgProcessLatency"] is None and empty["lastInvocation"] is None


def test_no_runtime_says_why() -> None:
    states = runtime.NoRuntime().instances(FunctionName("a", "b", "c"), 2)
    assert [s.running for s in states.values()] == [False, False]
    assert runtime.status(states)["instances"][0]["status"]["error"] == runtime.NO_RUNTIME


def test_prometheus_series_in_pulsars_names() -> None:
    name = FunctionName("public", "default", "f")
    state = InstanceState(running=True, report=REPORT)
    text = runtime.prometheus("standalone", [(name, {0: state})])
    labels = (
        'tenant="public",namespace="public/default",name="f",instance_id="0",'
        'cluster="standalone",fqfn="public/default/f"'
    )
    for line in (
        f"pulsar_function_received_total{{{labels}}} 4",
        f"pulsar_function_processed_successfully_total{{{labels}}} 3",
        f"pulsar_function_user_exceptions_total{{{labels}}} 1",
        f"pulsar_function_received_1min{{{labels}}} 2",
        f"pulsar_function_process_latency_ms_sum{{{labels}}} 8",
        f"pulsar_function_process_latency_ms_count{{{labels}}} 4",
        f"pulsar_function_last_invocation{{{labels}}} 1700000000000",
        f"pulsar_function_user_metric_size_sum{{{labels}}} 10",
        "# TYPE pulsar_function_process_latency_ms summary",
        "# TYPE pulsar_function_received_total counter",
    ):
        assert line in text.splitlines(), line
    assert runtime.prometheus("standalone", []) == ""
    other = FunctionName("public", "default", "g")
    both = runtime.prometheus("standalone", [(name, {0: state}), (other, {0: state})])
    families = {f.name: f.type for f in parser.text_string_to_metric_families(both)}
    assert families["pulsar_function_process_latency_ms"] == "summary"
    assert families["pulsar_function_received"] == "counter"
