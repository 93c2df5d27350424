"""Functions in the metadata store: their records and packages (``docs/metadata.md``).

A function's record (``keys.function``) is JSON: ``config`` (the checked FunctionConfig,
:mod:`.config`), ``package`` (file name, size, SHA-256, chunk count and the package version
whose chunks hold it), ``stopped`` (instance ids stopped by ``functions stop``),
``restarts`` (instance id -> how many times ``functions restart`` asked for it: a supervisor
restarts an instance whose count moved), ``createTime``/``updateTime`` (ms). Every change is
a compare-and-set of that record, so two brokers answering admin calls cannot lose each
other's changes.

A package is stored in chunks under ``keys.function_package_chunk`` (a value is at most
1 MiB), all chunks of a new version written before the record that names it, so a reader
never sees a record whose package is incomplete; the versions it replaces are deleted after.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from magnetar.functions.config import FunctionName
from magnetar.metadata import api, keys

CHUNK_BYTES: Final = 512 * 1024
MAX_PACKAGE_BYTES: Final = 32 * 1024 * 1024
MAX_CAS_ATTEMPTS: Final = 20


class FunctionNotFound(LookupError):
    def __init__(self, name: FunctionName) -> None:
        super().__init__(f"Function {name.name} doesn't exist")
        self.name = name


class FunctionExists(Exception):
    def __init__(self, name: FunctionName) -> None:
        super().__init__(f"Function {name.name} already exists")
        self.name = name


class PackageTooLarge(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Function:
    """A function's record as read, with the version it was read at."""

    name: FunctionName
    record: dict[str, Any]
    version: api.Version

    @property
    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = self.record["config"]
        return config

    @property
    def parallelism(self) -> int:
        return int(self.config.get("parallelism", 1))

    @property
    def stopped(self) -> set[int]:
        return {int(i) for i in self.record.get("stopped", [])}

    def restarts(self, instance: int) -> int:
        return int(self.record.get("restarts", {}).get(str(instance), 0))


def _now_ms() -> int:
    return int(time.time() * 1000)


def name_of(key: str) -> FunctionName:
    """The name of the function whose record is at ``key``."""
    tenant, namespace, name = key[len(keys.FUNCTIONS) + 1 :].split("/")
    return FunctionName(keys.unsegment(tenant), keys.unsegment(namespace), keys.unsegment(name))


async def get(store: api.MetadataStore, name: FunctionName) -> Function | None:
    record = await store.get(keys.function(name.tenant, name.namespace, name.name))
    if record is None:
        return None
    return Function(name, json.loads(record.value), record.version)


async def require(store: api.MetadataStore, name: FunctionName) -> Function:
    found = await get(store, name)
    if found is None:
        raise FunctionNotFound(name)
    return found


async def list_names(store: api.MetadataStore, tenant: str, namespace: str) -> list[str]:
    children = await store.children(keys.function_namespace(tenant, namespace))
    return sorted(keys.unsegment(c) for c in children)


async def all_functions(store: api.MetadataStore) -> list[Function]:
    """Every function of every namespace (what a supervisor runs)."""
    return [
        Function(name_of(r.key), json.loads(r.value), r.version)
        async for r in store.scan_all(keys.FUNCTIONS)
    ]


async def _write_package(
    store: api.MetadataStore, name: FunctionName, file_name: str, data: bytes
) -> dict[str, Any]:
    if len(data) > MAX_PACKAGE_BYTES:
        raise PackageTooLarge(
            f"package {file_name} is {len(data)} bytes, over {MAX_PACKAGE_BYTES} bytes"
        )
    version = await store.next_id("function-package")
    chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    for index, chunk in enumerate(chunks):
        key = keys.function_package_chunk(name.tenant, name.namespace, name.name, version, index)
        await store.put(key, chunk, expected_version=api.NOT_EXISTS)
    return {
        "file": file_name,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "chunks": len(chunks),
        "version": version,
    }


async def _drop_packages_but(store: api.MetadataStore, name: FunctionName, keep: int) -> None:
    parent = keys.function_packages(name.tenant, name.namespace, name.name)
    for child in await store.children(parent):
        if int(child) != keep:
            await store.delete_prefix(f"{parent}/{child}")


async def create(
    store: api.MetadataStore,
    name: FunctionName,
    config: dict[str, Any],
    *,
    file_name: str,
    data: bytes,
) -> Function:
    """Store a new function (FunctionExists when the name is taken)."""
    key = keys.function(name.tenant, name.namespace, name.name)
    if await store.get(key) is not None:
        raise FunctionExists(name)
    package = await _write_package(store, name, file_name, data)
    now = _now_ms()
    record = {
        "config": config,
        "package": package,
        "stopped": [],
        "restarts": {},
        "createTime": now,
        "updateTime": now,
    }
    try:
        version = await store.put(key, json.dumps(record).encode(), expected_version=api.NOT_EXISTS)
    except api.BadVersionError:
        await store.delete_prefix(
            f"{keys.function_packages(name.tenant, name.namespace, name.name)}"
            f"/{package['version']:020d}"
        )
        raise FunctionExists(name) from None
    return Function(name, record, version)


async def change(
    store: api.MetadataStore, name: FunctionName, edit: Callable[[dict[str, Any]], None]
) -> Function:
    """Compare-and-set ``edit`` on the record (FunctionNotFound when absent)."""
    key = keys.function(name.tenant, name.namespace, name.name)
    for _ in range(MAX_CAS_ATTEMPTS):
        current = await require(store, name)
        record = json.loads(json.dumps(current.record))
        edit(record)
        record["updateTime"] = _now_ms()
        try:
            version = await store.put(
                key, json.dumps(record).encode(), expected_version=current.version
            )
        except api.BadVersionError:
            continue
        return Function(name, record, version)
    raise api.StoreUnavailableError(f"{key}: changed concurrently {MAX_CAS_ATTEMPTS} times")


async def update(
    store: api.MetadataStore,
    name: FunctionName,
    config: dict[str, Any],
    *,
    package: tuple[str, bytes] | None,
) -> Function:
    """Replace the config (and the package when one is given)."""
    await require(store, name)
    written = None if package is None else await _write_package(store, name, *package)

    def edit(record: dict[str, Any]) -> None:
        record["config"] = config
        if written is not None:
            record["package"] = written

    updated = await change(store, name, edit)
    await _drop_packages_but(store, name, int(updated.record["package"]["version"]))
    return updated


async def delete(store: api.MetadataStore, name: FunctionName) -> None:
    """Delete the function, its packages and its state."""
    found = await require(store, name)
    key = keys.function(name.tenant, name.namespace, name.name)
    try:
        await store.delete(key, expected_version=found.version)
    except api.BadVersionError:
        await store.delete(key)
    await store.delete_prefix(keys.function_packages(name.tenant, name.namespace, name.name))
    await store.delete_prefix(keys.function_state(name.tenant, name.namespace, name.name))


async def read_package(store: api.MetadataStore, function: Function) -> bytes:
    """The function's package, checked against its recorded size and SHA-256."""
    package = function.record["package"]
    name = function.name
    parts = []
    for index in range(int(package["chunks"])):
        key = keys.function_package_chunk(
            name.tenant, name.namespace, name.name, int(package["version"]), index
        )
        record = await store.get(key)
        if record is None:
            raise api.MetadataError(f"{key}: package chunk missing")
        parts.append(record.value)
    data = b"".join(parts)
    if len(data) != package["size"] or hashlib.sha256(data).hexdigest() != package["sha256"]:
        raise api.MetadataError(f"package of {name.fqfn}: size or checksum does not match")
    return data


def check_instance(function: Function, instance: int | None) -> None:
    """Refuse an instance id the function does not have (ValueError naming it)."""
    if instance is not None and not 0 <= instance < function.parallelism:
        raise ValueError(
            f"instance {instance} of {function.name.fqfn}: the function has "
            f"{function.parallelism} instance(s), 0..{function.parallelism - 1}"
        )


async def set_running(
    store: api.MetadataStore, name: FunctionName, *, instance: int | None, running: bool
) -> Function:
    """``functions start`` / ``stop``: every instance, or one."""

    def edit(record: dict[str, Any]) -> None:
        parallelism = int(record["config"].get("parallelism", 1))
        targets = set(range(parallelism)) if instance is None else {instance}
        stopped = {int(i) for i in record.get("stopped", [])}
        stopped = stopped - targets if running else stopped | targets
        record["stopped"] = sorted(stopped)

    found = await require(store, name)
    check_instance(found, instance)
    return await change(store, name, edit)


async def restart(store: api.MetadataStore, name: FunctionName, *, instance: int | None) -> None:
    """``functions restart``: every instance, or one."""

    def edit(record: dict[str, Any]) -> None:
        parallelism = int(record["config"].get("parallelism", 1))
        targets = range(parallelism) if instance is None else [instance]
        restarts = record.setdefault("restarts", {})
        for i in targets:
            restarts[str(i)] = int(restarts.get(str(i), 0)) + 1

    found = await require(store, name)
    check_instance(found, instance)
    await change(store, name, edit)
