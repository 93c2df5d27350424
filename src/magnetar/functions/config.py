"""Pulsar's ``FunctionConfig`` (the JSON ``functions create`` uploads): checked and defaulted.

Pure, so the admin API, the supervisor and the instance agree on one reading and tests check
it without a server. :func:`check` turns the uploaded JSON into the stored config (Pulsar's
field names, its defaults filled in) or raises :class:`ConfigError` naming the field, so a bad
config is refused at create time and nothing starts. Only Python functions run here: a
``jar`` or ``go`` function, a window config or an unknown guarantee is refused by name.
"""

from __future__ import annotations

import ast
import io
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from magnetar.common import errors

GUARANTEES: Final = ("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE", "MANUAL")
"""Pulsar's ``ProcessingGuarantees``; ATLEAST_ONCE is its default."""

POSITIONS: Final = ("Latest", "Earliest")
"""Pulsar's ``SubscriptionInitialPosition`` (``--subs-position``)."""

DEFAULT_RESOURCES: Final = {"cpu": 1.0, "ram": 1073741824, "disk": 10737418240}
"""Pulsar's ``Resources`` defaults (one core, 1 GiB of RAM, 10 GiB of disk)."""

MAX_PARALLELISM: Final = 64
"""The most instances one function may ask for in this runtime."""

_NAME = re.compile(r"^[-=:.\w]+$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

UNSUPPORTED: Final = {
    "jar": "Java functions do not run in Magnetar (Python only): give a .py package",
    "go": "Go functions do not run in Magnetar (Python only): give a .py package",
    "windowConfig": "window functions are Java-only in Pulsar; not supported for Python",
}


class ConfigError(errors.PermanentError, ValueError):
    """A function config that cannot run; the message names the field and the problem."""


@dataclass(frozen=True, slots=True)
class FunctionName:
    tenant: str
    namespace: str
    name: str

    @property
    def fqfn(self) -> str:
        """``tenant/namespace/name``, Pulsar's fully qualified function name."""
        return f"{self.tenant}/{self.namespace}/{self.name}"


def _str(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"functionConfig.{key} must be a string, got {value!r}")
    return value or None


def _bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"functionConfig.{key} must be true or false, got {value!r}")
    return value


def _int(config: Mapping[str, Any], key: str, *, low: int, default: int | None) -> int | None:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"functionConfig.{key} must be an integer >= {low}, got {value!r}")
    return value


def _string_map(config: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"functionConfig.{key} must be a JSON object, got {value!r}")
    return dict(value)


def topic_name(topic: str, what: str) -> str:
    """A topic as Pulsar completes it: ``persistent://public/default/t`` for a short name."""
    if not isinstance(topic, str) or not topic.strip():
        raise ConfigError(f"{what}: empty topic name")
    topic = topic.strip()
    if "://" in topic:
        domain, _, rest = topic.partition("://")
        if domain not in ("persistent", "non-persistent") or rest.count("/") != 2:
            raise ConfigError(f"{what}: {topic!r} is not a topic name")
        return topic
    parts = topic.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{topic}"
    if len(parts) == 3 and all(parts):
        return f"persistent://{topic}"
    raise ConfigError(f"{what}: {topic!r} is not a topic name (tenant/namespace/topic)")


def check_name(value: str, what: str) -> str:
    if not value or not _NAME.match(value):
        raise ConfigError(f"{what} {value!r} is not a valid name")
    return value


def check(
    raw: Mapping[str, Any], *, name: FunctionName, package_file: str | None
) -> dict[str, Any]:
    """The stored ``FunctionConfig`` for ``raw`` (as uploaded) at ``name`` (the URL's): every
    field checked, Pulsar's defaults filled in. ``package_file``: the uploaded file's name
    (None when the config names no new package, as an update may)."""
    if not isinstance(raw, Mapping):
        raise ConfigError("functionConfig must be a JSON object")
    for key, reason in UNSUPPORTED.items():
        if raw.get(key):
            raise ConfigError(f"functionConfig.{key}: {reason}")
    runtime = (_str(raw, "runtime") or "PYTHON").upper()
    if runtime != "PYTHON":
        raise ConfigError(f"functionConfig.runtime {runtime!r}: only PYTHON functions run here")
    for key, expected in (
        ("tenant", name.tenant),
        ("namespace", name.namespace),
        ("name", name.name),
    ):
        given = _str(raw, key)
        if given is not None and given != expected:
            raise ConfigError(
                f"functionConfig.{key} {given!r} does not match the URL's {expected!r}"
            )
    class_name = _str(raw, "className")
    if class_name is None:
        raise ConfigError("functionConfig.className is required (module.Class, or a module)")
    if not _IDENTIFIER.match(class_name):
        raise ConfigError(f"functionConfig.className {class_name!r} is not a Python name")

    inputs_raw = raw.get("inputs") or []
    if isinstance(inputs_raw, str):
        inputs_raw = [t for t in inputs_raw.split(",") if t]
    if not isinstance(inputs_raw, list):
        raise ConfigError("functionConfig.inputs must be a list of topics")
    inputs = [topic_name(t, "functionConfig.inputs") for t in inputs_raw]
    serde_inputs = {
        topic_name(t, "functionConfig.customSerdeInputs"): s
        for t, s in _string_map(raw, "customSerdeInputs").items()
    }
    for serde in serde_inputs.values():
        if not isinstance(serde, str) or not _IDENTIFIER.match(serde):
            raise ConfigError(f"functionConfig.customSerdeInputs: {serde!r} is not a class name")
    input_specs = {
        topic_name(t, "functionConfig.inputSpecs"): spec
        for t, spec in _string_map(raw, "inputSpecs").items()
    }
    for topic, spec in input_specs.items():
        if not isinstance(spec, dict):
            raise ConfigError(f"functionConfig.inputSpecs[{topic}] must be a JSON object")
        serde = spec.get("serdeClassName")
        if serde:
            serde_inputs.setdefault(topic, serde)
    pattern = _str(raw, "topicsPattern")
    if pattern is not None:
        pattern = topic_name(pattern, "functionConfig.topicsPattern")
        try:
            re.compile(pattern.partition("://")[2])
        except re.error as err:
            raise ConfigError(f"functionConfig.topicsPattern {pattern!r}: {err}") from None
    all_inputs = sorted(set(inputs) | set(serde_inputs) | set(input_specs))
    if not all_inputs and pattern is None:
        raise ConfigError("no input topic: give inputs, topicsPattern or customSerdeInputs")

    output = _str(raw, "output")
    if output is not None:
        output = topic_name(output, "functionConfig.output")
        if output in all_inputs:
            raise ConfigError(f"functionConfig.output {output} is also an input topic")
    log_topic = _str(raw, "logTopic")
    if log_topic is not None:
        log_topic = topic_name(log_topic, "functionConfig.logTopic")
    dead_letter = _str(raw, "deadLetterTopic")
    if dead_letter is not None:
        dead_letter = topic_name(dead_letter, "functionConfig.deadLetterTopic")
    output_serde = _str(raw, "outputSerdeClassName")
    if output_serde is not None and not _IDENTIFIER.match(output_serde):
        raise ConfigError(f"functionConfig.outputSerdeClassName {output_serde!r} is not a name")

    guarantee = (_str(raw, "processingGuarantees") or "ATLEAST_ONCE").upper()
    if guarantee not in GUARANTEES:
        raise ConfigError(
            f"functionConfig.processingGuarantees {guarantee!r}: expected one of {GUARANTEES}"
        )
    position = _str(raw, "subscriptionPosition") or "Latest"
    if position not in POSITIONS:
        raise ConfigError(
            f"functionConfig.subscriptionPosition {position!r}: expected Latest or Earliest"
        )
    parallelism = _int(raw, "parallelism", low=1, default=1)
    assert parallelism is not None
    if parallelism > MAX_PARALLELISM:
        raise ConfigError(f"functionConfig.parallelism {parallelism} is over {MAX_PARALLELISM}")
    retries = _int(raw, "maxMessageRetries", low=0, default=None)
    if dead_letter is not None and retries is None:
        raise ConfigError("functionConfig.deadLetterTopic needs maxMessageRetries")
    if retries is not None and guarantee == "EFFECTIVELY_ONCE":
        raise ConfigError(
            "maxMessageRetries/deadLetterTopic do not go with EFFECTIVELY_ONCE: a retried "
            "message's output would follow later ones and be dropped as a duplicate"
        )
    resources = dict(DEFAULT_RESOURCES)
    for key, value in _string_map(raw, "resources").items():
        if key not in DEFAULT_RESOURCES:
            raise ConfigError(f"functionConfig.resources.{key}: unknown (cpu, ram, disk)")
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"functionConfig.resources.{key} must be positive, got {value!r}")
        resources[key] = value
    retain_ordering = _bool(raw, "retainOrdering", False)
    retain_key_ordering = _bool(raw, "retainKeyOrdering", False)
    if retain_ordering and retain_key_ordering:
        raise ConfigError("retainOrdering and retainKeyOrdering exclude each other")
    sub_name = _str(raw, "subName") or f"{name.tenant}/{name.namespace}/{name.name}"
    config: dict[str, Any] = {
        "tenant": name.tenant,
        "namespace": name.namespace,
        "name": name.name,
        "className": class_name,
        "inputs": inputs,
        "customSerdeInputs": serde_inputs,
        "topicsPattern": pattern,
        "inputSpecs": input_specs,
        "output": output,
        "outputSerdeClassName": output_serde,
        "logTopic": log_topic,
        "processingGuarantees": guarantee,
        "retainOrdering": retain_ordering,
        "retainKeyOrdering": retain_key_ordering,
        "forwardSourceMessageProperty": _bool(raw, "forwardSourceMessageProperty", True),
        "userConfig": _string_map(raw, "userConfig"),
        "secrets": _string_map(raw, "secrets"),
        "runtime": "PYTHON",
        "autoAck": _bool(raw, "autoAck", True),
        "maxMessageRetries": retries,
        "deadLetterTopic": dead_letter,
        "subName": sub_name,
        "subscriptionPosition": position,
        "parallelism": parallelism,
        "resources": resources,
        "timeoutMs": _int(raw, "timeoutMs", low=1, default=None),
        "cleanupSubscription": _bool(raw, "cleanupSubscription", True),
        "skipToLatest": _bool(raw, "skipToLatest", False),
        "py": package_file,
    }
    return {k: v for k, v in config.items() if v is not None}


def merge_update(stored: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """An update's config over the stored one (Pulsar's ``functions update``: the fields the
    update gives replace the stored ones)."""
    merged = dict(stored)
    merged.update({k: v for k, v in update.items() if v is not None})
    return merged


def check_source(source: bytes, *, file_name: str, class_name: str) -> None:
    """Check, without running it, that a ``.py`` package defines what ``className`` names:
    ``module.Class`` (``module`` the file's name) or a ``module`` with a top-level
    ``process``. Raises ConfigError naming the problem."""
    module = file_name.rsplit("/", 1)[-1].removesuffix(".py")
    try:
        tree = ast.parse(source, filename=file_name)
    except (SyntaxError, ValueError) as err:
        raise ConfigError(f"package {file_name}: not valid Python: {err}") from None
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    }
    for node in tree.body:
        if isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    if class_name == module:
        if "process" not in defined:
            raise ConfigError(
                f"className {class_name!r}: module {file_name} has no top-level process(input)"
            )
        return
    head, _, attr = class_name.rpartition(".")
    if head != module:
        raise ConfigError(
            f"className {class_name!r}: expected {module}.<Class> for package {file_name}"
        )
    if attr not in defined:
        raise ConfigError(f"className {class_name!r}: {file_name} defines no {attr!r}")


_WHEEL_NAME = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[A-Za-z0-9_.!+]+)"
    r"(?:-(?P<build>\d[A-Za-z0-9_.]*))?-(?P<tags>[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+)\.whl$"
)
"""A wheel's file name (PEP 427: ``name-version[-build]-python-abi-platform.whl``); pip
installs nothing else."""


def check_package_name(file_name: str) -> str:
    """The package's file name as stored: a ``.py`` module, a ``.zip`` (see
    :func:`zip_layout`) or a ``.whl`` wheel (see :func:`wheel_layout`)."""
    base = file_name.replace("\\", "/").rsplit("/", 1)[-1]
    if base.endswith(".zip") and len(base) > 4:
        return base
    if base.endswith(".whl"):
        if not _WHEEL_NAME.match(base):
            raise ConfigError(
                f"package {file_name!r}: not a wheel's file name "
                "(name-version-python-abi-platform.whl)"
            )
        return base
    if not base.endswith(".py") or not _IDENTIFIER.match(base[:-3]):
        raise ConfigError(
            f"package {file_name!r}: expected a .py module (a Python identifier + .py), "
            "a .zip or a .whl"
        )
    return base


def _module_files(module: str) -> tuple[str, str]:
    """Where a dotted module lives in a folder on ``sys.path``: ``a/b.py`` or
    ``a/b/__init__.py``."""
    path = module.replace(".", "/")
    return f"{path}.py", f"{path}/__init__.py"


def wheel_layout(data: bytes, *, file_name: str, class_name: str) -> str:
    """Check a ``.whl`` package: a zip with a ``*.dist-info/WHEEL`` and ``METADATA``, whose
    files hold the module ``className`` names -- ``module.Class`` (``module`` dotted as in
    the wheel, ``pkg.mod``) or a ``module`` with a top-level ``process``. The module's path
    inside the wheel; ConfigError names the problem."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = set(archive.namelist())
    except (zipfile.BadZipFile, ValueError) as err:
        raise ConfigError(f"package {file_name}: not a valid wheel (zip archive): {err}") from None
    with archive:
        infos = {n.split("/", 1)[0] for n in names if n.count("/") == 1 and n.endswith("/WHEEL")}
        dist_info = sorted(d for d in infos if d.endswith(".dist-info"))
        if not dist_info or f"{dist_info[0]}/METADATA" not in names:
            raise ConfigError(
                f"package {file_name}: not a wheel (no *.dist-info/WHEEL and METADATA)"
            )
        for name in names:
            if name.startswith("/") or ".." in name.split("/"):
                raise ConfigError(f"package {file_name}: unsafe path {name!r} in the wheel")
        head, _, _attr = class_name.rpartition(".")
        # className is the module itself (process(input)) or module.Attr
        for module in (class_name, head):
            if not module:
                continue
            for candidate in _module_files(module):
                if candidate in names:
                    check_source(
                        archive.read(candidate), file_name=f"{module}.py", class_name=class_name
                    )
                    return candidate
    raise ConfigError(
        f"package {file_name}: className {class_name!r}: the wheel holds no module "
        f"{head or class_name} ({' or '.join(_module_files(head or class_name))})"
    )


@dataclass(frozen=True, slots=True)
class ZipLayout:
    """Where things are in a ``.zip`` package (paths inside the archive)."""

    source_dir: str
    """The folder holding the function's module (on the instance's ``sys.path``)."""
    module_file: str
    requirements: str | None
    """``requirements.txt`` beside ``src/`` (or the module), installed per function."""
    deps_dir: str | None
    """A ``deps/`` folder of wheels the requirements may be installed from."""


def zip_layout(data: bytes, *, file_name: str, class_name: str) -> ZipLayout:
    """Check a ``.zip`` package and find its parts. Pulsar's layout
    (``NAME/src/MODULE.py``, ``NAME/requirements.txt``, ``NAME/deps/*.whl``) or the module at
    the top; the module is the first part of ``className``. ConfigError names the problem."""
    module = class_name.split(".")[0]
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
    except (zipfile.BadZipFile, ValueError) as err:
        raise ConfigError(f"package {file_name}: not a valid zip archive: {err}") from None
    for name in names:
        if name.startswith("/") or ".." in name.split("/"):
            raise ConfigError(f"package {file_name}: unsafe path {name!r} in the archive")
    candidates = sorted(
        (n for n in names if n.rsplit("/", 1)[-1] == f"{module}.py"),
        key=lambda n: (n.count("/"), n),
    )
    if not candidates:
        raise ConfigError(f"package {file_name}: no {module}.py in the archive (className)")
    module_file = candidates[0]
    source_dir = module_file.rpartition("/")[0]
    root = source_dir.removesuffix("src").rstrip("/") if source_dir.endswith("src") else source_dir
    prefix = f"{root}/" if root else ""
    requirements = f"{prefix}requirements.txt"
    deps = f"{prefix}deps/"
    with archive:
        check_source(archive.read(module_file), file_name=f"{module}.py", class_name=class_name)
        if requirements in names:
            try:
                archive.read(requirements).decode()
            except UnicodeDecodeError:
                raise ConfigError(f"package {file_name}: {requirements} is not text") from None
    return ZipLayout(
        source_dir=source_dir,
        module_file=module_file,
        requirements=requirements if requirements in names else None,
        deps_dir=deps.rstrip("/") if any(n.startswith(deps) for n in names) else None,
    )
