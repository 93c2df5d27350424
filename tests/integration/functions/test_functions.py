"""Pulsar Functions for Python in ``magnetar standalone``: Pulsar's own Python examples
(exclamation, native ``process(input)``, word count with counters, publish with properties)
created with ``magnetar admin functions create``, messages in through the official client,
results out, status and stats in Pulsar's shapes, state read with querystate, and the
supervisor restarting an instance killed with SIGKILL."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.client.admin import AdminClient
from tests.support import standalone as standalone_procs
from tests.support.standalone import StandaloneProc
from tests.support.wait import wait_until

EXAMPLES = Path(__file__).parent / "examples"
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    with standalone_procs.running(tmp_path_factory.mktemp("functions") / "data") as proc:
        yield proc


@pytest.fixture(scope="module")
def client(standalone: StandaloneProc) -> Iterator[pulsar.Client]:
    with standalone_procs.client(standalone) as c:
        yield c


def admin(standalone: StandaloneProc, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", "admin", "--admin-url", standalone.http_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def admin_client(standalone: StandaloneProc) -> AdminClient:
    return AdminClient(standalone.http_url, timeout=30.0)


def as_json(standalone: StandaloneProc, *args: str) -> Any:
    return json.loads(admin(standalone, "--output", "json", *args).stdout)


def create(standalone: StandaloneProc, name: str, py: str, classname: str, *flags: str) -> None:
    admin(
        standalone,
        "functions", "create",
        "--name", name,
        "--py", str(EXAMPLES / py),
        "--classname", classname,
        "--subs-position", "Earliest",
        *flags,
    )  # fmt: skip


def running(standalone: StandaloneProc, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = as_json(standalone, "functions", "status", "--name", name)
        return status if status["numRunning"] == status["numInstances"] else None

    return wait_until(check, timeout=TIMEOUT_S, what=f"{name} running")


def receive_all(consumer: pulsar.Consumer, count: int) -> list[pulsar.Message]:
    out = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=int(TIMEOUT_S * 1000))
        consumer.acknowledge(msg)
        out.append(msg)
    return out


def test_exclamation_function_results_properties_status_stats(
    standalone: StandaloneProc, client: pulsar.Client
) -> None:
    out = client.subscribe("excl-out", "check", initial_position=pulsar.InitialPosition.Earliest)
    create(
        standalone,
        "excl",
        "exclamation_function.py",
        "exclamation_function.ExclamationFunction",
        "--inputs", "excl-in",
        "--output", "excl-out",
    )  # fmt: skip
    producer = client.create_producer("excl-in")
    sent = {producer.send(word.encode()).serialize(): word for word in ("hello", "world")}
    results = receive_all(out, 2)
    assert sorted(m.data().decode() for m in results) == ["hello!", "world!"]
    for msg in results:
        props = msg.properties()
        assert props["__pfn_input_topic__"] == "persistent://public/default/excl-in"
        source = base64.b64decode(props["__pfn_input_msg_id__"])
        assert sent[source] + "!" == msg.data().decode()

    status = running(standalone, "excl")
    assert status["numInstances"] == 1
    instance = status["instances"][0]
    assert instance["instanceId"] == 0
    assert set(instance["status"]) == {
        "running", "error", "numRestarts", "numReceived", "numSuccessfullyProcessed",
        "numUserExceptions", "latestUserExceptions", "numSystemExceptions",
        "latestSystemExceptions", "averageLatency", "lastInvocationTime", "workerId",
    }  # fmt: skip
    assert instance["status"]["workerId"].startswith("c-standalone-fw-")

    def processed() -> dict[str, Any] | None:
        stats = as_json(standalone, "functions", "stats", "--name", "excl")
        return stats if stats["processedSuccessfullyTotal"] == 2 else None

    stats = wait_until(processed, timeout=TIMEOUT_S, what="stats count both messages")
    assert stats["receivedTotal"] == 2
    assert stats["userExceptionsTotal"] == 0 and stats["systemExceptionsTotal"] == 0
    assert stats["avgProcessLatency"] is not None
    assert stats["1min"]["receivedTotal"] == 2
    assert stats["lastInvocation"] > 0
    [one] = stats["instances"]
    assert one["instanceId"] == 0
    assert one["metrics"]["processedSuccessfullyTotal"] == 2
    assert set(one["metrics"]) == {
        "receivedTotal", "processedSuccessfullyTotal", "systemExceptionsTotal",
        "userExceptionsTotal", "avgProcessLatency", "1min", "lastInvocation", "userMetrics",
    }  # fmt: skip
    instance_status = as_json(
        standalone, "functions", "status", "--name", "excl", "--instance-id", "0"
    )
    assert instance_status["numSuccessfullyProcessed"] == 2

    labels = {
        "tenant": "public", "namespace": "public/default", "name": "excl", "instance_id": "0",
        "cluster": "standalone", "fqfn": "public/default/excl",
    }  # fmt: skip
    samples = {
        s.name: s.value
        for family in text_string_to_metric_families(standalone.metrics())
        for s in family.samples
        if s.labels == labels
    }
    assert samples["pulsar_function_processed_successfully_total"] == 2
    assert samples["pulsar_function_received_total"] == 2
    assert samples["pulsar_function_process_latency_ms_count"] == 2

    triggered = admin(
        standalone, "functions", "trigger", "--name", "excl", "--trigger-value", "hey"
    )
    assert triggered.stdout.strip() == "hey!"
    wrong = admin(
        standalone, "functions", "trigger", "--name", "excl", "--trigger-value", "x",
        "--topic", "not-an-input", ok=False,
    )  # fmt: skip
    assert "400" in wrong.stderr and "unidentified topic" in wrong.stderr

    config = as_json(standalone, "functions", "get", "--fqfn", "public/default/excl")
    assert config["className"] == "exclamation_function.ExclamationFunction"
    assert config["inputs"] == ["persistent://public/default/excl-in"]
    assert config["output"] == "persistent://public/default/excl-out"
    assert config["processingGuarantees"] == "ATLEAST_ONCE"
    assert config["runtime"] == "PYTHON"
    assert "excl" in as_json(standalone, "functions", "list")
    out.close()


def test_native_process_module(standalone: StandaloneProc, client: pulsar.Client) -> None:
    out = client.subscribe("native-out", "check", initial_position=pulsar.InitialPosition.Earliest)
    create(
        standalone,
        "native",
        "native_exclamation_function.py",
        "native_exclamation_function",
        "--inputs", "native-in",
        "--output", "native-out",
        "--processing-guarantees", "ATMOST_ONCE",
    )  # fmt: skip
    producer = client.create_producer("native-in")
    producer.send(b"plain")
    [msg] = receive_all(out, 1)
    assert msg.data() == b"plain!"
    out.close()


def test_word_count_counters_and_querystate(
    standalone: StandaloneProc, client: pulsar.Client
) -> None:
    out = client.subscribe("wc-out", "check", initial_position=pulsar.InitialPosition.Earliest)
    create(
        standalone,
        "wordcount",
        "wordcount_function.py",
        "wordcount_function.WordCountFunction",
        "--inputs", "wc-in",
        "--output", "wc-out",
    )  # fmt: skip
    producer = client.create_producer("wc-in")
    for line in ("the quick fox", "the lazy dog", "the end"):
        producer.send(line.encode())
    assert len(receive_all(out, 3)) == 3
    state = as_json(standalone, "functions", "querystate", "--name", "wordcount", "--key", "the")
    assert state["key"] == "the" and state["numberValue"] == 3
    assert state["version"] >= 1
    fox = as_json(standalone, "functions", "querystate", "--name", "wordcount", "--key", "fox")
    assert fox["numberValue"] == 1
    missing = admin(
        standalone, "functions", "querystate", "--name", "wordcount", "--key", "cat", ok=False
    )
    assert missing.returncode == 1 and "404" in missing.stderr

    admin(
        standalone, "functions", "putstate", "--name", "wordcount",
        "--state", '{"key": "note", "stringValue": "hi"}',
    )  # fmt: skip
    note = as_json(standalone, "functions", "querystate", "--name", "wordcount", "--key", "note")
    assert note["stringValue"] == "hi"
    out.close()


def test_publish_to_a_second_topic_with_properties(
    standalone: StandaloneProc, client: pulsar.Client
) -> None:
    target = "persistent://public/default/pub-target"
    out = client.subscribe(target, "check", initial_position=pulsar.InitialPosition.Earliest)
    create(
        standalone,
        "publisher",
        "publish_function.py",
        "publish_function.PublishFunction",
        "--inputs", "pub-in",
        "--user-config", json.dumps({"publish-topic": target}),
    )  # fmt: skip
    client.create_producer("pub-in").send(b"news")
    [msg] = receive_all(out, 1)
    assert msg.data() == b"news!"
    assert msg.properties()["test-property-key"] == "test-property-value"
    out.close()


def test_stop_start_restart_and_crash_recovery(
    standalone: StandaloneProc, client: pulsar.Client
) -> None:
    out = client.subscribe("life-out", "check", initial_position=pulsar.InitialPosition.Earliest)
    create(
        standalone,
        "life",
        "exclamation_function.py",
        "exclamation_function.ExclamationFunction",
        "--inputs", "life-in",
        "--output", "life-out",
    )  # fmt: skip
    running(standalone, "life")
    admin(standalone, "functions", "stop", "--name", "life")
    wait_until(
        lambda: as_json(standalone, "functions", "status", "--name", "life")["numRunning"] == 0,
        timeout=TIMEOUT_S,
        what="stopped",
    )
    producer = client.create_producer("life-in")
    producer.send(b"while-stopped")
    admin(standalone, "functions", "start", "--name", "life")
    [msg] = receive_all(out, 1)
    assert msg.data() == b"while-stopped!"

    report = standalone.data_dir / "functions/public/default/life/0/metrics.json"
    pid = json.loads(report.read_text())["pid"]
    os.kill(pid, signal.SIGKILL)  # the instance: a child of the standalone this test started

    def restarted() -> dict[str, Any] | None:
        status = as_json(standalone, "functions", "status", "--name", "life")["instances"][0]
        return status if status["status"]["numRestarts"] >= 1 else None

    status = wait_until(restarted, timeout=TIMEOUT_S, what="the killed instance restarted")
    assert "exited with code" in status["status"]["error"] or status["status"]["running"]
    producer.send(b"after-crash")
    # at-least-once: what the killed instance processed but had not acknowledged yet comes
    # again; nothing is lost
    seen = [m.data() for m in receive_all(out, 1)]
    while seen[-1] != b"after-crash!":
        seen += [m.data() for m in receive_all(out, 1)]
    assert set(seen) <= {b"while-stopped!", b"after-crash!"}

    admin(standalone, "functions", "restart", "--name", "life")
    wait_until(
        lambda: running(standalone, "life")["instances"][0]["status"]["numRestarts"] >= 2,
        timeout=TIMEOUT_S,
        what="restart counted",
    )
    admin(standalone, "functions", "delete", "--name", "life")
    assert "life" not in as_json(standalone, "functions", "list")
    gone = admin(standalone, "functions", "get", "--name", "life", ok=False)
    assert gone.returncode == 1 and "404" in gone.stderr
    out.close()


def test_bad_functions_are_refused_at_create_time(
    standalone: StandaloneProc, tmp_path: Path
) -> None:
    missing_class = admin(
        standalone, "functions", "create", "--name", "bad1",
        "--py", str(EXAMPLES / "exclamation_function.py"),
        "--classname", "exclamation_function.NoSuchClass", "--inputs", "bad-in",
        ok=False,
    )  # fmt: skip
    assert missing_class.returncode == 1
    assert "400" in missing_class.stderr and "NoSuchClass" in missing_class.stderr
    no_input = admin(
        standalone, "functions", "create", "--name", "bad2",
        "--py", str(EXAMPLES / "exclamation_function.py"),
        "--classname", "exclamation_function.ExclamationFunction",
        ok=False,
    )  # fmt: skip
    assert "400" in no_input.stderr and "no input topic" in no_input.stderr
    bad_guarantee = admin(
        standalone, "functions", "create", "--name", "bad3",
        "--py", str(EXAMPLES / "exclamation_function.py"),
        "--classname", "exclamation_function.ExclamationFunction", "--inputs", "bad-in",
        "--function-config-file", "/dev/null",
        ok=False,
    )  # fmt: skip
    assert bad_guarantee.returncode == 2 and "--function-config-file" in bad_guarantee.stderr
    # a config the CLI passes on and the broker refuses, naming the field
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"processingGuarantees": "TWICE"}))
    for name, flags, reason in (
        ("bad4", ["--function-config-file", str(config_file)], "processingGuarantees 'TWICE'"),
        ("bad5", ["--parallelism", "0"], "parallelism must be an integer >= 1"),
        ("bad6", ["--dead-letter-topic", "dlq"], "deadLetterTopic needs maxMessageRetries"),
        ("bad7", ["--user-config", "[1]"], "user-config"),
    ):
        refused = admin(
            standalone, "functions", "create", "--name", name,
            "--py", str(EXAMPLES / "exclamation_function.py"),
            "--classname", "exclamation_function.ExclamationFunction", "--inputs", "bad-in",
            *flags,
            ok=False,
        )  # fmt: skip
        assert refused.returncode != 0 and reason in refused.stderr, refused.stderr
    names = as_json(standalone, "functions", "list")
    assert not {f"bad{i}" for i in range(1, 8)} & set(names)


def test_retries_dead_letter_log_topic_and_user_metrics(
    standalone: StandaloneProc, client: pulsar.Client
) -> None:
    earliest = pulsar.InitialPosition.Earliest
    out = client.subscribe("picky-out", "check", initial_position=earliest)
    dlq = client.subscribe("picky-dlq", "check", initial_position=earliest)
    logs = client.subscribe("picky-log", "check", initial_position=earliest)
    create(
        standalone,
        "picky",
        "picky_function.py",
        "picky_function.PickyFunction",
        "--inputs", "picky-in",
        "--output", "picky-out",
        "--max-message-retries", "2",
        "--dead-letter-topic", "picky-dlq",
        "--log-topic", "picky-log",
    )  # fmt: skip
    producer = client.create_producer("picky-in")
    producer.send(b"good")
    producer.send(b"bad one")
    [ok] = receive_all(out, 1)
    assert ok.data() == b"GOOD"
    [dead] = receive_all(dlq, 1)  # after the first delivery and two retries
    assert dead.data() == b"bad one"
    lines = [m.data().decode() for m in receive_all(logs, 2)]
    assert any("got good" in line for line in lines)

    def counted() -> dict[str, Any] | None:
        stats = as_json(standalone, "functions", "stats", "--name", "picky")
        return stats if stats["userExceptionsTotal"] >= 3 else None

    stats = wait_until(counted, timeout=TIMEOUT_S, what="three user exceptions")
    assert stats["processedSuccessfullyTotal"] == 1
    assert stats["instances"][0]["metrics"]["userMetrics"]["length"] > 0
    status = as_json(standalone, "functions", "status", "--name", "picky")
    exceptions = status["instances"][0]["status"]["latestUserExceptions"]
    assert "refusing bad one" in exceptions[-1]["exceptionString"]
    for consumer in (out, dlq, logs):
        consumer.close()


def test_every_context_method(standalone: StandaloneProc, client: pulsar.Client) -> None:
    earliest = pulsar.InitialPosition.Earliest
    out = client.subscribe("probe-out", "check", initial_position=earliest)
    side = client.subscribe("probe-side", "check", initial_position=earliest)
    create(
        standalone,
        "probe",
        "context_probe.py",
        "context_probe.ContextProbe",
        "--inputs", "probe-in",
        "--output", "probe-out",
        "--user-config", json.dumps({"side": "probe-side", "n": 1}),
        "--secrets", json.dumps({"password": "s3cret"}),
    )  # fmt: skip
    sent = client.create_producer("probe-in").send(
        b"ping", properties={"a": "b"}, partition_key="k1", event_timestamp=1234
    )
    [msg] = receive_all(out, 1)
    answer = json.loads(msg.data())
    assert answer["message_id"] == base64.b64encode(sent.serialize()).decode()
    assert answer["key"] == answer["partition_key"] == "k1"
    assert answer["event_time"] == 1234
    assert answer["properties"] == {"a": "b"}
    assert answer["topic"] == "persistent://public/default/probe-in"
    assert (answer["tenant"], answer["namespace"], answer["name"]) == ("public", "default", "probe")
    assert answer["function_id"] and answer["version"]
    assert answer["instance_id"] == 0
    assert answer["logger"] == "function.public/default/probe"
    assert answer["user_config"] == {"side": "probe-side", "n": 1}
    assert answer["secret"] == "s3cret"
    assert answer["inputs"] == ["persistent://public/default/probe-in"]
    assert answer["output"] == "persistent://public/default/probe-out"
    assert answer["output_serde"] is None
    assert answer["counter"] == 1 and answer["counter_after_delete"] == 0
    assert answer["state"] == "ping" and answer["missing_state"] is None
    assert msg.properties()["a"] == "b"  # the input's properties are forwarded
    [published] = receive_all(side, 1)
    assert published.data() == b"ping" and published.properties() == {"p": "1"}
    for consumer in (out, side):
        consumer.close()


def test_custom_serde_update_parallelism_and_download(
    standalone: StandaloneProc, client: pulsar.Client
) -> None:
    out = client.subscribe("json-out", "check", initial_position=pulsar.InitialPosition.Earliest)
    create(
        standalone,
        "totals",
        "json_function.py",
        "json_function.Total",
        "--custom-serde-inputs", json.dumps({"json-in": "json_function.JsonSerDe"}),
        "--output", "json-out",
        "--output-serde-classname", "json_function.JsonSerDe",
    )  # fmt: skip
    producer = client.create_producer("persistent://public/default/json-in")
    producer.send(json.dumps({"values": [1, 2, 3]}).encode())
    [msg] = receive_all(out, 1)
    assert json.loads(msg.data()) == {"instance": 0, "total": 6}

    admin(standalone, "functions", "update", "--name", "totals", "--parallelism", "2")
    status = running(standalone, "totals")
    assert status["numInstances"] == status["numRunning"] == 2
    assert as_json(standalone, "functions", "get", "--name", "totals")["parallelism"] == 2

    package = admin_client(standalone).call(
        "GET", "/admin/v3/functions/public/default/totals/download", raw=True
    )
    assert package == (EXAMPLES / "json_function.py").read_bytes()
    out.close()


def test_topics_pattern_and_update_with_new_code(
    standalone: StandaloneProc, client: pulsar.Client, tmp_path: Path
) -> None:
    out = client.subscribe("pat-out", "check", initial_position=pulsar.InitialPosition.Earliest)
    first, second = client.create_producer("pat-in-1"), client.create_producer("pat-in-2")
    create(
        standalone,
        "pattern",
        "exclamation_function.py",
        "exclamation_function.ExclamationFunction",
        "--topics-pattern", "persistent://public/default/pat-in-.*",
        "--output", "pat-out",
    )  # fmt: skip
    first.send(b"one")
    second.send(b"two")
    assert sorted(m.data() for m in receive_all(out, 2)) == [b"one!", b"two!"]

    # new code under the same module and class name: the instance restarts with it
    code = tmp_path / "exclamation_function.py"
    code.write_text(
        "from pulsar import Function\n\n\n"
        "class ExclamationFunction(Function):\n"
        "    def process(self, input, context):\n"
        "        return input + '?'\n"
    )
    admin(standalone, "functions", "update", "--name", "pattern", "--py", str(code))

    def answered() -> bytes | None:
        first.send(b"three")
        try:
            msg = out.receive(timeout_millis=1000)
        except pulsar.Timeout:
            return None
        out.acknowledge(msg)
        return msg.data() if msg.data() == b"three?" else None

    assert wait_until(answered, timeout=TIMEOUT_S, what="the new code answers") == b"three?"
    out.close()


def zip_package(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


INFLECTOR = """
import inflection
from pulsar import Function


class Camel(Function):
    def process(self, input, context):
        return inflection.camelize(input)
"""

INFLECTION_WHEEL = EXAMPLES / "deps" / "inflection-0.5.1-py2.py3-none-any.whl"
"""A small pure-Python package as PyPI serves it (MIT, its licence inside the wheel), kept
here so the tests reach no registry."""


def wheel(name: str, version: str, files: dict[str, str]) -> bytes:
    """A pure-Python wheel of ``files`` (what a build backend would make of them)."""
    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: magnetar-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for file_name, text in files.items():
            archive.writestr(file_name, text)
    return buffer.getvalue()


def test_zip_package_with_a_requirement(
    standalone: StandaloneProc, client: pulsar.Client, tmp_path: Path
) -> None:
    # a PyPI package the test environment does not have, installed for this function only
    # from the package's deps/ folder (Pulsar's layout; --no-index: no registry is asked)
    with pytest.raises(ImportError):
        __import__("inflection")
    package = tmp_path / "inflector.zip"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("inflector/src/inflector.py", INFLECTOR)
        archive.writestr("inflector/requirements.txt", "--no-index\ninflection==0.5.1\n")
        archive.write(INFLECTION_WHEEL, f"inflector/deps/{INFLECTION_WHEEL.name}")
    out = client.subscribe("camel-out", "check", initial_position=pulsar.InitialPosition.Earliest)
    admin(
        standalone, "functions", "create", "--name", "camel",
        "--py", str(package), "--classname", "inflector.Camel",
        "--inputs", "camel-in", "--output", "camel-out", "--subs-position", "Earliest",
    )  # fmt: skip
    client.create_producer("camel-in").send(b"hello_world")
    [msg] = receive_all(out, 1)
    assert msg.data() == b"HelloWorld"
    out.close()

    # requirements that cannot be installed (pip told not to look anywhere): the reason shows
    broken = zip_package(
        tmp_path / "broken.zip",
        {
            "broken/src/inflector.py": INFLECTOR,
            "broken/requirements.txt": "--no-index\nnot-installable-here\n",
        },
    )
    admin(
        standalone, "functions", "create", "--name", "broken",
        "--py", str(broken), "--classname", "inflector.Camel", "--inputs", "broken-in",
    )  # fmt: skip

    def failed() -> str | None:
        status = as_json(standalone, "functions", "status", "--name", "broken")
        error = status["instances"][0]["status"]["error"]
        return error if "installing requirements.txt failed" in error else None

    wait_until(failed, timeout=TIMEOUT_S, what="the failed install reported")
    assert as_json(standalone, "functions", "status", "--name", "broken")["numRunning"] == 0
    admin(standalone, "functions", "delete", "--name", "broken")

    not_zip = tmp_path / "bad.zip"
    not_zip.write_bytes(b"no archive")
    refused = admin(
        standalone, "functions", "create", "--name", "bad4",
        "--py", str(not_zip), "--classname", "inflector.Camel", "--inputs", "x",
        ok=False,
    )  # fmt: skip
    assert "400" in refused.stderr and "not a valid zip" in refused.stderr


SHOUTER = """
from pulsar import Function


class Shout(Function):
    def process(self, input, context):
        return input.upper() + "!"
"""


def test_wheel_package(standalone: StandaloneProc, client: pulsar.Client, tmp_path: Path) -> None:
    # the function shipped as a wheel (a package folder, className pkg.module.Class),
    # installed into the function's own folder: not importable by the test environment
    with pytest.raises(ImportError):
        __import__("shouter")
    package = tmp_path / "shouter-0.1-py3-none-any.whl"
    package.write_bytes(
        wheel("shouter", "0.1", {"shouter/__init__.py": "", "shouter/fn.py": SHOUTER})
    )
    out = client.subscribe("shout-out", "check", initial_position=pulsar.InitialPosition.Earliest)
    admin(
        standalone, "functions", "create", "--name", "shout",
        "--py", str(package), "--classname", "shouter.fn.Shout",
        "--inputs", "shout-in", "--output", "shout-out", "--subs-position", "Earliest",
    )  # fmt: skip
    client.create_producer("shout-in").send(b"hey")
    [msg] = receive_all(out, 1)
    assert msg.data() == b"HEY!"
    out.close()
    assert as_json(standalone, "functions", "get", "--name", "shout")["py"] == package.name
    fetched = admin_client(standalone).call(
        "GET", "/admin/v3/functions/public/default/shout/download", raw=True
    )
    assert fetched == package.read_bytes()
    admin(standalone, "functions", "delete", "--name", "shout")

    # refused at create time, naming the problem; nothing stored
    not_wheel = tmp_path / "shouter-0.2-py3-none-any.whl"
    not_wheel.write_bytes(zipfile_bytes({"shouter/fn.py": SHOUTER}))
    bad_name = tmp_path / "shouter.whl"
    bad_name.write_bytes(package.read_bytes())
    for path, class_name, reason in (
        (package, "shouter.fn.Whisper", "defines no 'Whisper'"),
        (package, "shouter.other.Shout", "holds no module shouter.other"),
        (not_wheel, "shouter.fn.Shout", "no *.dist-info/WHEEL"),
        (bad_name, "shouter.fn.Shout", "not a wheel's file name"),
    ):
        refused = admin(
            standalone, "functions", "create", "--name", "bad-wheel",
            "--py", str(path), "--classname", class_name, "--inputs", "x",
            ok=False,
        )  # fmt: skip
        assert "400" in refused.stderr and reason in refused.stderr, refused.stderr
    assert "bad-wheel" not in as_json(standalone, "functions", "list")


def zipfile_bytes(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()
