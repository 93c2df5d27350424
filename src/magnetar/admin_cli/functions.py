"""``magnetar admin functions ...``: pulsar-admin's ``functions`` verbs and flags over the
admin API v3 (``/admin/v3/functions/{tenant}/{namespace}/{name}``).

A function is named by ``--tenant``/``--namespace``/``--name`` (``public``/``default`` and,
for create, the class's last part when not given, as pulsar-admin) or ``--fqfn
tenant/namespace/name``. ``create`` and ``update`` read the ``--py`` file and send it with the
FunctionConfig built from the flags (or a ``--function-config-file`` JSON, the flags on top)
as Pulsar's multipart form. Registered into :mod:`.commands` when ``magnetar.admin_cli`` is
imported.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Final

from magnetar.admin_cli.client import AdminCliError, Request
from magnetar.admin_cli.commands import arg, verb
from magnetar.admin_cli.convert import path_part
from magnetar.client.admin import FormField

V3: Final = "/admin/v3/functions"

NAMING = (
    arg("--tenant", help="the function's tenant (default public)"),
    arg("--namespace", help="the function's namespace (default default)"),
    arg("--name", help="the function's name"),
    arg("--fqfn", help="tenant/namespace/name, instead of the three flags"),
)
INSTANCE = arg("--instance-id", dest="instance_id", type=int, help="one instance only")


def _json_object(text: str, flag: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise AdminCliError(f"{flag}: not valid JSON: {err}", 2) from None
    if not isinstance(value, dict):
        raise AdminCliError(f"{flag}: expected a JSON object", 2)
    return value


def _name(a: argparse.Namespace, *, default_name: str | None = None) -> tuple[str, str, str]:
    if a.fqfn:
        parts = a.fqfn.split("/")
        if len(parts) != 3 or not all(parts):
            raise AdminCliError(f"--fqfn {a.fqfn!r}: use tenant/namespace/name", 2)
        if a.tenant or a.namespace or a.name:
            raise AdminCliError("give --fqfn or --tenant/--namespace/--name, not both", 2)
        return parts[0], parts[1], parts[2]
    name = a.name or default_name
    if not name:
        raise AdminCliError("the function's name is required (--name or --fqfn)", 2)
    return a.tenant or "public", a.namespace or "default", name


def _path(names: tuple[str, str, str], tail: str = "") -> str:
    return f"{V3}/" + "/".join(path_part(p, "name") for p in names) + tail


def _instance_path(a: argparse.Namespace, action: str) -> str:
    tail = f"/{action}" if a.instance_id is None else f"/{a.instance_id}/{action}"
    return _path(_name(a), tail)


CONFIG_FLAGS = (
    *NAMING,
    arg("--py", help="the function's package: a .py file, a .zip or a .whl"),
    arg("--classname", help="module.Class (a pulsar.Function), or a module with process()"),
    arg("--inputs", help="input topics, comma-separated"),
    arg("--topics-pattern", dest="topics_pattern", help="input topics by regular expression"),
    arg("--custom-serde-inputs", dest="custom_serde_inputs", help="JSON: topic -> SerDe class"),
    arg("--output", dest="output_topic", help="output topic"),
    arg("--output-serde-classname", dest="output_serde", help="SerDe class of the output"),
    arg("--log-topic", dest="log_topic", help="topic for the function's log lines"),
    arg(
        "--processing-guarantees",
        dest="guarantees",
        choices=("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE", "MANUAL"),
        help="processing guarantee (default ATLEAST_ONCE)",
    ),
    arg("--parallelism", type=int, help="number of instances (default 1)"),
    arg("--user-config", dest="user_config", help="JSON object given to the function"),
    arg("--secrets", help="JSON object: secret name -> value"),
    arg("--subs-name", dest="subs_name", help="input subscription (default tenant/ns/name)"),
    arg(
        "--subs-position",
        dest="subs_position",
        choices=("Latest", "Earliest"),
        help="where a new subscription starts (default Latest)",
    ),
    arg("--retain-ordering", dest="retain_ordering", action="store_true", default=None),
    arg("--retain-key-ordering", dest="retain_key_ordering", action="store_true", default=None),
    arg("--dead-letter-topic", dest="dead_letter_topic", help="topic for failed messages"),
    arg("--max-message-retries", dest="max_retries", type=int, help="retries before the DLQ"),
    arg("--auto-ack", dest="auto_ack", choices=("true", "false"), help="default true"),
    arg("--timeout-ms", dest="timeout_ms", type=int, help="message timeout"),
    arg("--cpu", type=float, help="CPU cores per instance"),
    arg("--ram", type=int, help="bytes of RAM per instance"),
    arg("--disk", type=int, help="bytes of disk per instance"),
    arg(
        "--function-config-file",
        dest="config_file",
        help="a FunctionConfig JSON file (flags given override it)",
    ),
)


def function_config(a: argparse.Namespace) -> tuple[dict[str, Any], FormField | None]:
    """The FunctionConfig and the package field the flags describe."""
    config: dict[str, Any] = {}
    if a.config_file:
        try:
            config = _json_object(Path(a.config_file).read_text(), "--function-config-file")
        except OSError as err:
            raise AdminCliError(f"--function-config-file: {err}", 2) from None
    flags: dict[str, Any] = {
        "className": a.classname,
        "topicsPattern": a.topics_pattern,
        "output": a.output_topic,
        "outputSerdeClassName": a.output_serde,
        "logTopic": a.log_topic,
        "processingGuarantees": a.guarantees,
        "parallelism": a.parallelism,
        "subName": a.subs_name,
        "subscriptionPosition": a.subs_position,
        "retainOrdering": a.retain_ordering,
        "retainKeyOrdering": a.retain_key_ordering,
        "deadLetterTopic": a.dead_letter_topic,
        "maxMessageRetries": a.max_retries,
        "timeoutMs": a.timeout_ms,
        "autoAck": None if a.auto_ack is None else a.auto_ack == "true",
    }
    if a.inputs:
        flags["inputs"] = [t.strip() for t in a.inputs.split(",") if t.strip()]
    for flag, key, text in (
        ("--custom-serde-inputs", "customSerdeInputs", a.custom_serde_inputs),
        ("--user-config", "userConfig", a.user_config),
        ("--secrets", "secrets", a.secrets),
    ):
        if text:
            flags[key] = _json_object(text, flag)
    resources = {
        k: v for k, v in (("cpu", a.cpu), ("ram", a.ram), ("disk", a.disk)) if v is not None
    }
    if resources:
        flags["resources"] = {**config.get("resources", {}), **resources}
    config.update({k: v for k, v in flags.items() if v is not None})
    class_name = config.get("className")
    default_name = class_name.rsplit(".", 1)[-1] if isinstance(class_name, str) else None
    config["tenant"], config["namespace"], config["name"] = _name(a, default_name=default_name)
    config["runtime"] = "PYTHON"
    package = None
    py = a.py or config.get("py")
    if py:
        try:
            data = Path(py).read_bytes()
        except OSError as err:
            raise AdminCliError(f"--py {py}: {err}", 2) from None
        config["py"] = Path(py).name
        package = FormField("data", data, Path(py).name, "application/octet-stream")
    return config, package


def _upload(method: str, a: argparse.Namespace, *, need_package: bool) -> Request:
    config, package = function_config(a)
    if need_package and package is None:
        raise AdminCliError("--py is required: the function's package (.py, .zip or .whl)", 2)
    fields = [FormField("functionConfig", json.dumps(config).encode())]
    if package is not None:
        fields.append(package)
    names = (config["tenant"], config["namespace"], config["name"])
    return Request(method, _path(names), form=tuple(fields))


@verb("functions", "create", "create a function and start its instances", *CONFIG_FLAGS)
def create(a: argparse.Namespace) -> Request:
    return _upload("POST", a, need_package=True)


@verb("functions", "update", "change a function's config or package", *CONFIG_FLAGS)
def update(a: argparse.Namespace) -> Request:
    return _upload("PUT", a, need_package=False)


@verb("functions", "get", "a function's FunctionConfig", *NAMING)
def get(a: argparse.Namespace) -> Request:
    return Request("GET", _path(_name(a)))


@verb("functions", "delete", "delete a function (its instances stop)", *NAMING)
def delete(a: argparse.Namespace) -> Request:
    return Request("DELETE", _path(_name(a)))


@verb(
    "functions",
    "list",
    "the functions of a namespace",
    arg("--tenant", default="public", help="tenant (default public)"),
    arg("--namespace", default="default", help="namespace (default default)"),
)
def list_functions(a: argparse.Namespace) -> Request:
    return Request("GET", f"{V3}/{path_part(a.tenant, 'tenant')}/{path_part(a.namespace, 'ns')}")


@verb("functions", "start", "start a function's instances (or one)", *NAMING, INSTANCE)
def start(a: argparse.Namespace) -> Request:
    return Request("POST", _instance_path(a, "start"))


@verb("functions", "stop", "stop a function's instances (or one)", *NAMING, INSTANCE)
def stop(a: argparse.Namespace) -> Request:
    return Request("POST", _instance_path(a, "stop"))


@verb("functions", "restart", "restart a function's instances (or one)", *NAMING, INSTANCE)
def restart(a: argparse.Namespace) -> Request:
    return Request("POST", _instance_path(a, "restart"))


@verb("functions", "status", "FunctionStatus: which instances run, counts", *NAMING, INSTANCE)
def status(a: argparse.Namespace) -> Request:
    return Request("GET", _instance_path(a, "status"))


@verb("functions", "stats", "FunctionStats: totals, last minute, per instance", *NAMING, INSTANCE)
def stats(a: argparse.Namespace) -> Request:
    return Request("GET", _instance_path(a, "stats"))


@verb(
    "functions",
    "querystate",
    "a key of the function's state (FunctionState)",
    *NAMING,
    arg("-k", "--key", required=True, help="state key"),
)
def querystate(a: argparse.Namespace) -> Request:
    return Request("GET", _path(_name(a), f"/state/{path_part(a.key, 'key')}"))


@verb(
    "functions",
    "putstate",
    "write a key of the function's state",
    *NAMING,
    arg("-s", "--state", required=True, help='FunctionState JSON: {"key": k, "stringValue": v}'),
)
def putstate(a: argparse.Namespace) -> Request:
    state = _json_object(a.state, "--state")
    key = state.get("key")
    if not isinstance(key, str) or not key:
        raise AdminCliError('--state: a FunctionState needs "key"', 2)
    field = FormField("state", json.dumps(state).encode())
    return Request("POST", _path(_name(a), f"/state/{path_part(key, 'key')}"), form=(field,))


@verb(
    "functions",
    "trigger",
    "send a value through the function and print its output",
    *NAMING,
    (
        arg("--trigger-value", dest="trigger_value", help="the value, as text"),
        arg("--trigger-file", dest="trigger_file", help="a file whose bytes are the value"),
    ),
    arg("--topic", help="the input topic (when the function has several)"),
)
def trigger(a: argparse.Namespace) -> Request:
    if a.trigger_file:
        try:
            field = FormField(
                "dataStream",
                Path(a.trigger_file).read_bytes(),
                Path(a.trigger_file).name,
                "application/octet-stream",
            )
        except OSError as err:
            raise AdminCliError(f"--trigger-file: {err}", 2) from None
    else:
        field = FormField("data", a.trigger_value.encode(), content_type="text/plain")
    fields = [field]
    if a.topic:
        fields.append(FormField("topic", a.topic.encode(), content_type="text/plain"))
    return Request("POST", _path(_name(a), "/trigger"), form=tuple(fields))
