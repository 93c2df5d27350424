"""One function instance: ``python -m magnetar.functions.instance --spec SPEC.json``.

Runs the user's code unchanged on the official Python client, as Pulsar's Python instance
does: ``className`` names a ``pulsar.Function`` subclass (``module.Class``: instantiated,
``process(input, context)``) or a module with a top-level ``process(input)``. Each message is
deserialized with its topic's SerDe (``serde.IdentitySerDe`` unless ``customSerdeInputs``
says otherwise; ``serde.X`` names Pulsar's own, anything else the user's module), processed,
and the result (unless None) serialized and sent to ``output`` with the properties
``__pfn_input_topic__`` and ``__pfn_input_msg_id__`` (the input's message id, serialized and
base64-encoded), after the input's own properties.

Processing guarantees:

* ``ATMOST_ONCE``: the input is acknowledged when received, before processing.
* ``ATLEAST_ONCE``: acknowledged once the output is stored (or at once when there is none);
  a user exception negatively acknowledges it (redelivered; with ``maxMessageRetries`` and
  ``deadLetterTopic``, the client's dead-letter policy moves it there after the retries).
* ``EFFECTIVELY_ONCE``: as at-least-once on a Failover subscription, and the output goes
  through one producer per input partition, named after the function and that partition,
  whose sequence ids are derived from the input's message id (:func:`sequence_id`). After a
  crash the input is redelivered from the last acknowledgement and the broker's
  deduplication (which must be on for the output topic) drops what was already stored. A
  failed send or a function that raises ends the instance (the supervisor restarts it)
  rather than retry one message out of order: its output would then be dropped as a
  duplicate of later ones.
* ``MANUAL``: nothing is acknowledged but what the function acknowledges (``context.ack``).

The instance writes its metrics report (counts, latency, the last exceptions, user metrics,
the last minute's counts) as JSON to ``reportFile`` every half second; the supervisor reads
it for status and stats (:mod:`.runtime`). An instance whose parent (the supervisor) is gone
stops, so a killed standalone leaves no instances behind. Against a secured broker the
instance authenticates and trusts as the broker's own client does (the spec's ``access``:
:func:`access`).
"""

from __future__ import annotations

import argparse
import base64
import collections
import importlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import pulsar
from pulsar.functions import serde as pulsar_serde

from magnetar.client import admin
from magnetar.functions import context as context_mod
from magnetar.security import client_auth

log = logging.getLogger("magnetar.functions.instance")

PFN_INPUT_TOPIC: Final = "__pfn_input_topic__"
PFN_INPUT_MSG_ID: Final = "__pfn_input_msg_id__"
REPORT_INTERVAL_S: Final = 0.5
LATEST_EXCEPTIONS: Final = 10
ONE_MINUTE_S: Final = 60.0
RETRY_DELAY_MS: Final = 1000


def sequence_id(msg_id: Any) -> int:
    """The output sequence id of an input message: ledger id, entry id and batch index + 1
    (0 for a message outside a batch) packed so that the order of inputs on one partition is
    the order of ids (ledger ids below 2**22, entry ids below 2**28 and batch indexes below
    2**13 - 1 keep it within 63 bits), + 1 because the official client numbers a message
    with sequence id 0 itself."""
    ledger, entry = int(msg_id.ledger_id()), int(msg_id.entry_id())
    batch = int(msg_id.batch_index()) + 1
    return ((((ledger << 28) | entry) << 13) | batch) + 1


def import_name(name: str, code_dir: str | None) -> Any:
    """What ``name`` names: a module, or an attribute of one (``module.Attr``); ``serde.X``
    falls back to Pulsar's own SerDes. Raises ImportError naming it."""
    if code_dir and code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        raise ImportError(f"cannot import {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        if module_name == "serde":
            module = pulsar_serde
        else:
            raise ImportError(f"cannot import {name!r}: no module {module_name!r}") from None
    if not hasattr(module, attr) and module_name == "serde":
        module = pulsar_serde
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"cannot import {name!r}: {module_name} has no {attr!r}") from None


def access(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keyword arguments of ``pulsar.Client`` and of the state calls'
    :class:`magnetar.client.admin.AdminClient` for the spec's ``access`` (the broker client's
    credentials and trust: :class:`magnetar.functions.supervisor.BrokerAccess`). Raises
    CredentialsError naming a plugin or parameters that cannot be used."""
    given = spec.get("access") or {}
    trust = given.get("tlsTrustCertsFile") or None
    verify = bool(given.get("tlsHostnameVerification", False))
    client: dict[str, Any] = {"tls_validate_hostname": verify}
    http: dict[str, Any] = {"tls_verify_hostname": verify}
    if trust:
        client["tls_trust_certs_file_path"] = trust
        http["tls_trust_certs_file"] = trust
    plugin = given.get("authPlugin")
    if not plugin:
        return client, http
    creds = client_auth.Credentials.parse(plugin, given.get("authParams") or "")
    http["credentials"] = creds
    if creds.method == "token":
        # a callable: the client asks again when the broker challenges an expired token
        client["authentication"] = pulsar.AuthenticationToken(creds.current_token)
    elif creds.method == "basic":
        client["authentication"] = pulsar.AuthenticationBasic(creds.user, creds.password)
    else:
        client["authentication"] = pulsar.AuthenticationTLS(creds.cert_file, creds.key_file)
    return client, http


class Metrics:
    """The instance's counters, thread-safe (producer callbacks run on the client's threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received = 0
        self.processed = 0
        self.user_exceptions = 0
        self.system_exceptions = 0
        self.latency_sum_ms = 0.0
        self.last_invocation: int | None = None
        self.latest_user: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=LATEST_EXCEPTIONS
        )
        self.latest_system: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=LATEST_EXCEPTIONS
        )
        self.user_metrics: dict[str, dict[str, float]] = {}
        self.seconds: dict[int, dict[str, float]] = {}
        """Per second of the monotonic clock: the counts and latency of the last minute."""

    def _event(self, kind: str, latency_ms: float = 0.0) -> None:
        second = int(time.monotonic())
        bucket = self.seconds.get(second)
        if bucket is None:
            bucket = self.seconds[second] = {}
            for old in [s for s in self.seconds if s <= second - ONE_MINUTE_S]:
                del self.seconds[old]
        bucket[kind] = bucket.get(kind, 0) + 1
        if latency_ms:
            bucket["latencySumMs"] = bucket.get("latencySumMs", 0.0) + latency_ms

    def received_one(self) -> None:
        with self.lock:
            self.received += 1
            self.last_invocation = int(time.time() * 1000)
            self._event("received")

    def processed_one(self, latency_ms: float) -> None:
        with self.lock:
            self.processed += 1
            self.latency_sum_ms += latency_ms
            self._event("processed", latency_ms)

    def user_exception(self, err: BaseException, latency_ms: float) -> None:
        with self.lock:
            self.user_exceptions += 1
            self.latency_sum_ms += latency_ms
            self.latest_user.append(_exception(err))
            self._event("userExceptions", latency_ms)

    def system_exception(self, err: BaseException | str) -> None:
        with self.lock:
            self.system_exceptions += 1
            self.latest_system.append(_exception(err))
            self._event("systemExceptions")

    def record(self, name: str, value: float) -> None:
        with self.lock:
            m = self.user_metrics.setdefault(name, {"sum": 0.0, "count": 0.0})
            m["sum"] += value
            m["count"] += 1

    def report(self) -> dict[str, Any]:
        with self.lock:
            cutoff = time.monotonic() - ONE_MINUTE_S
            one_min: dict[str, float] = {}
            for second, bucket in self.seconds.items():
                if second >= cutoff:
                    for kind, value in bucket.items():
                        one_min[kind] = one_min.get(kind, 0) + value
            return {
                "pid": os.getpid(),
                "received": self.received,
                "processed": self.processed,
                "userExceptions": self.user_exceptions,
                "systemExceptions": self.system_exceptions,
                "latencySumMs": self.latency_sum_ms,
                "lastInvocation": self.last_invocation,
                "latestUserExceptions": list(self.latest_user),
                "latestSystemExceptions": list(self.latest_system),
                "userMetrics": {k: dict(v) for k, v in self.user_metrics.items()},
                "oneMin": {"latencySumMs": 0.0, **one_min},
            }


def _exception(err: BaseException | str) -> dict[str, Any]:
    text = err if isinstance(err, str) else "".join(traceback.format_exception_only(err)).strip()
    return {"exceptionString": text, "timestampMs": int(time.time() * 1000)}


class LogTopicHandler(logging.Handler):
    """The function's log lines to its ``logTopic`` (Pulsar's log topic), sent without
    waiting; a failed send is left to the client's log, never the function's problem."""

    def __init__(self, producer: Any, fqfn: str, instance: int) -> None:
        super().__init__()
        self.producer = producer
        self.properties = {"fqn": fqfn, "instance": str(instance)}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record).encode()
            self.producer.send_async(
                line, lambda *_: None, properties={**self.properties, "loglevel": record.levelname}
            )
        except Exception:  # a log line must never fail the function
            self.handleError(record)


class Instance:
    """One instance of a function (see the module docstring)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.config: dict[str, Any] = spec["config"]
        self.instance_id = int(spec["instanceId"])
        self.fqfn = f"{self.config['tenant']}/{self.config['namespace']}/{self.config['name']}"
        self.guarantee = self.config.get("processingGuarantees", "ATLEAST_ONCE")
        self.auto_ack = bool(self.config.get("autoAck", True)) and self.guarantee != "MANUAL"
        self.code = spec.get("code")
        paths = spec.get("paths", [])  # the module's own folder first
        self.code_dir = paths[0] if paths else str(Path(self.code).parent) if self.code else None
        for path in reversed(paths):  # the package's folders first
            if path not in sys.path:
                sys.path.insert(0, path)
        self.metrics = Metrics()
        self.report_file = Path(spec["reportFile"])
        self.stopping = threading.Event()
        self.parent = os.getppid()
        self.fatal: str | None = None
        self.client: Any = None
        self.consumer: Any = None
        self.producers: dict[str, Any] = {}
        self.producers_lock = threading.Lock()
        self.serdes: dict[str, Any] = {}
        self.input_serdes: dict[str, Any] = {}
        self.function: Any = None
        self.pure: Any = None

    # --- set-up -----------------------------------------------------------------------------

    def load_function(self) -> None:
        target = import_name(self.config["className"], self.code_dir)
        if isinstance(target, types.ModuleType):
            if not callable(getattr(target, "process", None)):
                raise ImportError(f"module {target.__name__} has no process(input)")
            self.pure = target.process
        elif isinstance(target, type):
            self.function = target()
            if not callable(getattr(self.function, "process", None)):
                raise ImportError(f"{self.config['className']} has no process method")
        elif callable(target):
            self.pure = target
        else:
            raise ImportError(f"{self.config['className']} is not a class, module or function")

    def serde(self, name: str | None) -> Any:
        name = name or "serde.IdentitySerDe"
        if name not in self.serdes:
            kind = import_name(name, self.code_dir)
            self.serdes[name] = kind() if isinstance(kind, type) else kind
        return self.serdes[name]

    def producer(self, topic: str, *, name: str | None = None, dedup: bool = False) -> Any:
        key = name or topic
        with self.producers_lock:
            if key not in self.producers:
                options: dict[str, Any] = {"producer_name": name}
                if dedup:
                    options["batching_enabled"] = False
                else:
                    options["batching_enabled"] = True
                    options["batching_max_publish_delay_ms"] = 1
                self.producers[key] = self.client.create_producer(
                    topic, block_if_queue_full=True, **options
                )
            return self.producers[key]

    def subscribe(self) -> None:
        config = self.config
        if self.guarantee == "EFFECTIVELY_ONCE" or config.get("retainOrdering"):
            consumer_type = pulsar.ConsumerType.Failover
        elif config.get("retainKeyOrdering"):
            consumer_type = pulsar.ConsumerType.KeyShared
        else:
            consumer_type = pulsar.ConsumerType.Shared
        topics = list(config.get("inputs", []))
        topics += [t for t in config.get("customSerdeInputs", {}) if t not in topics]
        topics += [t for t in config.get("inputSpecs", {}) if t not in topics]
        target: Any = topics
        if config.get("topicsPattern"):
            target = re.compile(config["topicsPattern"])
        options: dict[str, Any] = {}
        retries = config.get("maxMessageRetries")
        if retries is not None:
            options["dead_letter_policy"] = pulsar.ConsumerDeadLetterPolicy(
                max_redeliver_count=retries,
                dead_letter_topic=config.get("deadLetterTopic"),
            )
            options["negative_ack_redelivery_delay_ms"] = RETRY_DELAY_MS
        position = (
            pulsar.InitialPosition.Earliest
            if config.get("subscriptionPosition") == "Earliest"
            else pulsar.InitialPosition.Latest
        )
        self.consumer = self.client.subscribe(
            target,
            config["subName"],
            consumer_type=consumer_type,
            consumer_name=f"{self.fqfn}:{self.instance_id}",
            initial_position=position,
            receiver_queue_size=1000,
            **options,
        )

    def logger(self) -> logging.Logger:
        logger = logging.getLogger(f"function.{self.fqfn}")
        logger.setLevel(logging.INFO)
        if self.config.get("logTopic"):
            producer = self.producer(self.config["logTopic"], name=None)
            logger.addHandler(LogTopicHandler(producer, self.fqfn, self.instance_id))
        return logger

    # --- the loop -----------------------------------------------------------------------------

    def input_serde(self, topic: str) -> Any:
        found = self.input_serdes.get(topic)
        if found is None:
            custom = self.config.get("customSerdeInputs", {})
            base = re.sub(r"-partition-\d+$", "", topic)
            found = self.input_serdes[topic] = self.serde(custom.get(topic) or custom.get(base))
        return found

    def process(self, msg: Any, context: context_mod.ContextImpl) -> None:
        self.metrics.received_one()
        if self.guarantee == "ATMOST_ONCE":
            self.consumer.acknowledge(msg)
        topic = msg.topic_name()
        try:
            value = self.input_serde(topic).deserialize(msg.data())
        except Exception as err:
            self.metrics.system_exception(err)
            log.warning("cannot deserialize a message of %s: %s", topic, err)
            self._failed(msg, f"cannot deserialize a message of {topic}: {err!r}")
            return
        context.message = msg
        started = time.perf_counter()
        try:
            if self.function is not None:
                result = self.function.process(value, context)
            else:
                result = self.pure(value)
        except Exception as err:
            self.metrics.user_exception(err, (time.perf_counter() - started) * 1000)
            log.info("the function raised on a message of %s: %r", topic, err)
            self._failed(msg, f"the function raised {err!r}")
            return
        self.metrics.processed_one((time.perf_counter() - started) * 1000)
        output = self.config.get("output")
        if result is None or not output:
            if self.auto_ack and self.guarantee != "ATMOST_ONCE":
                self.consumer.acknowledge(msg)
            return
        self.send(msg, result, output)

    def _failed(self, msg: Any, why: str) -> None:
        if self.guarantee == "EFFECTIVELY_ONCE":
            # a retried message's output would come after later ones' and be dropped as a
            # duplicate: end instead, and the subscription gives it again, in order
            self.fatal = f"{why} under EFFECTIVELY_ONCE: the instance restarts"
            self.stopping.set()
        elif self.guarantee == "ATLEAST_ONCE":
            self.consumer.negative_acknowledge(msg)

    def send(self, msg: Any, result: Any, output: str) -> None:
        try:
            data = self.serde(self.config.get("outputSerdeClassName")).serialize(result)
        except Exception as err:
            self.metrics.system_exception(err)
            self._failed(msg, f"cannot serialize the output: {err!r}")
            return
        if self.fatal:
            return  # (ending: nothing more goes out)
        properties: dict[str, str] = {}
        if self.config.get("forwardSourceMessageProperty", True):
            properties.update(msg.properties())
        properties[PFN_INPUT_TOPIC] = msg.topic_name()
        properties[PFN_INPUT_MSG_ID] = base64.b64encode(msg.message_id().serialize()).decode()
        options: dict[str, Any] = {"properties": properties}
        if msg.partition_key():
            options["partition_key"] = msg.partition_key()
        if msg.event_timestamp():
            options["event_timestamp"] = msg.event_timestamp()
        if self.guarantee == "EFFECTIVELY_ONCE":
            source = msg.topic_name()
            producer = self.producer(
                output, name=f"{self.fqfn}-{source.replace('://', '-')}", dedup=True
            )
            options["sequence_id"] = sequence_id(msg.message_id())
        else:
            producer = self.producer(output)

        def sent(result: Any, _msg_id: Any) -> None:
            if result == pulsar.Result.Ok:
                if self.auto_ack and self.guarantee != "ATMOST_ONCE":
                    self.consumer.acknowledge(msg)
                return
            self.metrics.system_exception(f"send to {output} failed: {result}")
            self._failed(msg, f"send to {output} failed: {result}")

        producer.send_async(data, sent, **options)

    def write_report(self) -> None:
        report = self.metrics.report()
        tmp = self.report_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(report))
        tmp.replace(self.report_file)

    def _reporter(self) -> None:
        while not self.stopping.wait(REPORT_INTERVAL_S):
            if os.getppid() != self.parent:  # the supervisor is gone: no orphans
                self.fatal = "the supervising process is gone"
                self.stopping.set()
                return
            try:
                self.write_report()
            except OSError as err:
                log.warning("cannot write the metrics report: %s", err)

    def run(self) -> int:
        self.write_report()
        reporter = threading.Thread(target=self._reporter, name="report", daemon=True)
        reporter.start()
        client_options, http_options = access(self.spec)
        self.client = pulsar.Client(
            self.spec["serviceUrl"], operation_timeout_seconds=30, **client_options
        )
        try:
            self.load_function()
            state = None
            if self.spec.get("webServiceUrl"):
                http = admin.AdminClient(self.spec["webServiceUrl"], timeout=30.0, **http_options)
                state = context_mod.StateClient(http, self.fqfn)
            context = context_mod.ContextImpl(
                config=self.config,
                instance_id=self.instance_id,
                function_id=str(self.spec.get("functionId", "")),
                function_version=str(self.spec.get("functionVersion", "")),
                logger=self.logger(),
                state=state,
                producer_for=self.producer,
                serde_for=self.serde,
                consumer=lambda: self.consumer,
                record_metric=self.metrics.record,
            )
            self.subscribe()
            log.info("instance %s:%d running", self.fqfn, self.instance_id)
            while not self.stopping.is_set():
                try:
                    msg = self.consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                self.process(msg, context)
            for producer in list(self.producers.values()):
                producer.flush()
        finally:
            self.stopping.set()
            self.write_report()
            self.client.close()
        if self.fatal:
            log.error("instance %s:%d ends: %s", self.fqfn, self.instance_id, self.fatal)
            return 1
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m magnetar.functions.instance")
    parser.add_argument("--spec", required=True, help="the instance's spec (JSON file)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("MAGNETAR_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    spec = json.loads(Path(args.spec).read_text())
    instance = Instance(spec)

    def stop(_signum: int, _frame: Any) -> None:
        instance.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return instance.run()


if __name__ == "__main__":
    sys.exit(main())
