"""Pulsar Functions' admin API v3: ``/admin/v3/functions/{tenant}/{namespace}[/{name}...]``.

Paths, forms and answers as Pulsar's ``FunctionsApiV3Resource``: create (POST) and update
(PUT) take a multipart form with ``functionConfig`` (Pulsar's FunctionConfig JSON) and
``data`` (the package file); get answers the stored FunctionConfig; list the names of a
namespace's functions; start / stop / restart act on every instance or one
(``/{instanceId}/...``); status and stats answer ``FunctionStatus`` and ``FunctionStatsImpl``;
``state/{key}`` reads (querystate) and writes (putstate: a ``state`` form field or a JSON
body holding a FunctionState) function state; ``trigger`` sends a value through the function
and answers its output (:mod:`magnetar.functions.trigger`); ``download`` answers the package.

Records, packages and state live in the metadata store (:mod:`magnetar.functions.registry`,
:mod:`magnetar.functions.state`); the instances are run by the runtime the process set under
:data:`RUNTIME` (``magnetar standalone``'s supervisor), else none runs and status says so. A
bad config, package or class is refused at create time (400 naming the problem) and nothing
is stored. Magnetar's additions: a putstate body with ``version`` is a compare-and-set (409
when the key moved; 0: only when absent) -- instances increment counters that way -- and
``DELETE state/{key}`` deletes a key (``del_counter``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import BodyPartReader, web

from magnetar.broker import http
from magnetar.broker.admin.common import AdminError, check_name, not_found, service
from magnetar.functions import config as fconfig
from magnetar.functions import registry, runtime, state, trigger
from magnetar.functions.config import FunctionName
from magnetar.metadata import api, keys
from magnetar.security import tls

V3: Final = "/admin/v3/functions"
RUNTIME = web.AppKey("magnetar_functions_runtime", runtime.Runtime)
"""``app[RUNTIME]``: what runs this broker's instances (absent: none here)."""

MAX_FORM_FIELD_BYTES: Final = 1024 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def with_runtime(functions_runtime: runtime.Runtime) -> Callable[[web.Application], None]:
    """An HTTP extension setting the runtime whose instances status, stats and ``/metrics``
    (Pulsar's ``pulsar_function_*`` series) report."""

    def extension(app: web.Application) -> None:
        app[RUNTIME] = functions_runtime
        if http.METRICS_SOURCES not in app:
            app[http.METRICS_SOURCES] = []
        app[http.METRICS_SOURCES].append(_metrics)

    return extension


async def _metrics(app: web.Application) -> str:
    service = app[http.SERVICE]
    functions_runtime = app[RUNTIME]
    if functions_runtime.stats_unavailable is not None:
        return ""
    functions = [
        (f.name, functions_runtime.instances(f.name, f.parallelism))
        for f in await registry.all_functions(service.store)
    ]
    return runtime.prometheus(service.config.cluster_name, functions)


def _runtime(request: web.Request) -> runtime.Runtime:
    found = request.app.get(RUNTIME)
    return found if found is not None else runtime.NoRuntime()


def _store(request: web.Request) -> api.MetadataStore:
    return service(request).store


async def _namespace(request: web.Request) -> tuple[str, str]:
    tenant = check_name(request.match_info["tenant"], "tenant")
    namespace = check_name(request.match_info["namespace"], "namespace")
    if await _store(request).get(keys.namespace(tenant, namespace)) is None:
        raise not_found(f"Namespace {tenant}/{namespace}")
    return tenant, namespace


async def _name(request: web.Request) -> FunctionName:
    tenant, namespace = await _namespace(request)
    try:
        name = fconfig.check_name(request.match_info["name"], "function name")
    except fconfig.ConfigError as err:
        raise AdminError(400, str(err)) from None
    return FunctionName(tenant, namespace, name)


def _instance(request: web.Request) -> int | None:
    text = request.match_info.get("instanceId")
    return None if text is None else int(text)


async def _function(request: web.Request) -> registry.Function:
    name = await _name(request)
    found = await registry.get(_store(request), name)
    if found is None:
        raise AdminError(404, f"Function {name.name} doesn't exist")
    return found


async def _form(request: web.Request) -> dict[str, tuple[str | None, bytes]]:
    """The multipart form's fields: name -> (file name, bytes); the package at most
    ``registry.MAX_PACKAGE_BYTES``, other fields 1 MiB."""
    if not request.content_type.startswith("multipart/"):
        raise AdminError(
            400,
            f"expected a multipart/form-data body (functionConfig, data), got "
            f"{request.content_type or 'none'}",
        )
    fields: dict[str, tuple[str | None, bytes]] = {}
    reader = await request.multipart()
    while True:
        part = await reader.next()
        if part is None:
            break
        if not isinstance(part, BodyPartReader) or not part.name:
            raise AdminError(400, "a multipart form field has no name")
        limit = registry.MAX_PACKAGE_BYTES if part.filename else MAX_FORM_FIELD_BYTES
        data = bytearray()
        while chunk := await part.read_chunk():
            data += chunk
            if len(data) > limit:
                raise AdminError(413, f"form field {part.name!r} is over {limit} bytes")
        fields[part.name] = (part.filename, bytes(data))
    return fields


def _config_json(fields: dict[str, tuple[str | None, bytes]]) -> dict[str, Any]:
    if "functionConfig" not in fields:
        raise AdminError(400, "Function config is not provided (form field functionConfig)")
    try:
        raw = json.loads(fields["functionConfig"][1] or b"{}")
    except ValueError as err:
        raise AdminError(400, f"functionConfig is not valid JSON: {err}") from None
    if not isinstance(raw, dict):
        raise AdminError(400, "functionConfig must be a JSON object")
    return raw


def _package(
    fields: dict[str, tuple[str | None, bytes]], raw: dict[str, Any]
) -> tuple[str, bytes] | None:
    if "url" in fields and fields["url"][1]:
        raise AdminError(
            400, "a package URL (--function-url) is not supported yet: upload the file (--py)"
        )
    if "data" not in fields:
        return None
    file_name = fields["data"][0] or raw.get("py") or ""
    try:
        return fconfig.check_package_name(str(file_name)), fields["data"][1]
    except fconfig.ConfigError as err:
        raise AdminError(400, str(err)) from None


def _checked(
    raw: dict[str, Any], name: FunctionName, package: tuple[str, bytes] | None, py: str | None
) -> dict[str, Any]:
    try:
        checked = fconfig.check(raw, name=name, package_file=py)
        if package is not None and package[0].endswith(".zip"):
            fconfig.zip_layout(package[1], file_name=package[0], class_name=checked["className"])
        elif package is not None and package[0].endswith(".whl"):
            fconfig.wheel_layout(package[1], file_name=package[0], class_name=checked["className"])
        elif package is not None:
            fconfig.check_source(package[1], file_name=package[0], class_name=checked["className"])
    except fconfig.ConfigError as err:
        raise AdminError(400, str(err)) from None
    return checked


async def create_function(request: web.Request) -> web.Response:
    """Create a function: multipart ``functionConfig`` (JSON) and ``data`` (the package: a
    .py, .zip or .whl)."""
    name = await _name(request)
    fields = await _form(request)
    raw = _config_json(fields)
    package = _package(fields, raw)
    if package is None:
        raise AdminError(400, "Function package is not provided (form field data, or --py)")
    config = _checked(raw, name, package, package[0])
    try:
        await registry.create(_store(request), name, config, file_name=package[0], data=package[1])
    except registry.FunctionExists as err:
        raise AdminError(400, str(err)) from None
    except registry.PackageTooLarge as err:
        raise AdminError(413, str(err)) from None
    return web.Response(status=204)


async def update_function(request: web.Request) -> web.Response:
    """Update a function: the fields of ``functionConfig`` replace the stored ones; a new
    ``data`` file replaces the package."""
    found = await _function(request)
    fields = await _form(request)
    raw = _config_json(fields)
    package = _package(fields, raw)
    merged = fconfig.merge_update(found.config, raw)
    if package is None:
        stored = found.record["package"]
        data = await registry.read_package(_store(request), found)
        config = _checked(merged, found.name, (stored["file"], data), stored["file"])
    else:
        config = _checked(merged, found.name, package, package[0])
    await registry.update(_store(request), found.name, config, package=package)
    return web.Response(status=204)


async def get_function(request: web.Request) -> web.Response:
    """The function's FunctionConfig."""
    found = await _function(request)
    return web.json_response(found.config)


async def list_functions(request: web.Request) -> web.Response:
    """The names of the namespace's functions."""
    tenant, namespace = await _namespace(request)
    return web.json_response(await registry.list_names(_store(request), tenant, namespace))


async def delete_function(request: web.Request) -> web.Response:
    """Delete the function, its package and its state (its instances stop)."""
    found = await _function(request)
    await registry.delete(_store(request), found.name)
    return web.Response(status=204)


def _check_instance(found: registry.Function, instance: int | None) -> None:
    try:
        registry.check_instance(found, instance)
    except ValueError as err:
        raise AdminError(400, str(err)) from None


async def _set_running(request: web.Request, running: bool) -> web.Response:
    found = await _function(request)
    instance = _instance(request)
    _check_instance(found, instance)
    await registry.set_running(_store(request), found.name, instance=instance, running=running)
    return web.Response(status=204)


async def start_function(request: web.Request) -> web.Response:
    """Start every instance of the function (or the one named)."""
    return await _set_running(request, True)


async def stop_function(request: web.Request) -> web.Response:
    """Stop every instance of the function (or the one named)."""
    return await _set_running(request, False)


async def restart_function(request: web.Request) -> web.Response:
    """Restart every instance of the function (or the one named)."""
    found = await _function(request)
    instance = _instance(request)
    _check_instance(found, instance)
    await registry.restart(_store(request), found.name, instance=instance)
    return web.Response(status=204)


def _states(request: web.Request, found: registry.Function) -> dict[int, runtime.InstanceState]:
    return _runtime(request).instances(found.name, found.parallelism)


async def function_status(request: web.Request) -> web.Response:
    """FunctionStatus (or one instance's FunctionInstanceStatusData)."""
    found = await _function(request)
    instance = _instance(request)
    _check_instance(found, instance)
    states = _states(request, found)
    if instance is not None:
        return web.json_response(runtime.instance_status(states[instance]))
    return web.json_response(runtime.status(states))


async def function_stats(request: web.Request) -> web.Response:
    """FunctionStatsImpl (or one instance's FunctionInstanceStatsDataImpl); 501 saying why
    when the runtime does not know the counters."""
    found = await _function(request)
    instance = _instance(request)
    _check_instance(found, instance)
    why = _runtime(request).stats_unavailable
    if why is not None:
        raise AdminError(501, why)
    states = _states(request, found)
    if instance is not None:
        return web.json_response(runtime.instance_stats(states[instance]))
    return web.json_response(runtime.stats(states))


def _state_key(request: web.Request) -> str:
    try:
        return state.check_key(request.match_info["key"])
    except ValueError as err:
        raise AdminError(400, str(err)) from None


async def get_state(request: web.Request) -> web.Response:
    """querystate: the key's FunctionState (404 when absent)."""
    found = await _function(request)
    key = _state_key(request)
    value = await state.get(_store(request), found.name, key)
    if value is None:
        raise AdminError(404, f"key '{key}' doesn't exist.")
    return web.json_response(state.to_json(value))


async def put_state(request: web.Request) -> web.Response:
    """putstate: a FunctionState in the ``state`` form field (or as the JSON body)."""
    found = await _function(request)
    key = _state_key(request)
    if request.content_type.startswith("multipart/"):
        fields = await _form(request)
        if "state" not in fields:
            raise AdminError(400, "the form has no state field (a FunctionState JSON)")
        text = fields["state"][1]
    else:
        text = await request.read()
    try:
        data, number, version = state.from_json(key, json.loads(text or b"null"))
    except ValueError as err:
        raise AdminError(400, f"state: {err}") from None
    try:
        await state.put(
            _store(request), found.name, key, data=data, number=number, expected_version=version
        )
    except state.StateConflict as err:
        raise AdminError(409, str(err)) from None
    return web.Response(status=204)


async def delete_state(request: web.Request) -> web.Response:
    """Delete a state key (404 when absent)."""
    found = await _function(request)
    key = _state_key(request)
    if not await state.delete(_store(request), found.name, key):
        raise AdminError(404, f"key '{key}' doesn't exist.")
    return web.Response(status=204)


async def trigger_function(request: web.Request) -> web.Response:
    """Send a value (form field ``data``, or the file ``dataStream``) to the function's input
    (``topic``, needed when it has several) and answer its output as text (204 without an
    output topic; 408 when none came in time)."""
    found = await _function(request)
    fields = await _form(request)
    if "dataStream" in fields:
        payload = fields["dataStream"][1]
    elif "data" in fields:
        payload = fields["data"][1]
    else:
        raise AdminError(400, "Trigger Data is not provided (form field data or dataStream)")
    inputs = list(found.config.get("inputs", []))
    inputs += [t for t in found.config.get("customSerdeInputs", {}) if t not in inputs]
    topic_text = fields.get("topic", (None, b""))[1].decode(errors="replace")
    if topic_text:
        try:
            topic = fconfig.topic_name(topic_text, "topic")
        except fconfig.ConfigError as err:
            raise AdminError(400, str(err)) from None
        if topic not in inputs:
            raise AdminError(400, f"Function in trigger function has unidentified topic {topic}")
    elif len(inputs) == 1:
        topic = inputs[0]
    else:
        raise AdminError(
            400, "Function in trigger function has more than 1 input topics (name one: topic)"
        )
    config = service(request).config
    url = config.service_url
    # the broker's own client settings, as the instances use them (docs/functions.md)
    try:
        context = (
            tls.client_context(config.security.broker_client_tls_settings())
            if url.startswith("pulsar+ssl://")
            else None
        )
        credentials = config.security.broker_client_credentials()
    except (tls.TlsConfigError, ValueError) as err:
        raise AdminError(500, f"the broker's client settings cannot be used: {err}") from None
    output = await trigger.trigger(
        url,
        input_topic=topic,
        output_topic=found.config.get("output"),
        payload=payload,
        ssl=context,
        auth=credentials,
    )
    if not found.config.get("output"):
        return web.Response(status=204)
    if output is None:
        raise AdminError(
            408,
            f"Request Timed Out: no output from {found.name.fqfn} within "
            f"{trigger.DEFAULT_TIMEOUT_S:g} s",
        )
    return web.Response(text=output.decode(errors="replace"))


async def download_function(request: web.Request) -> web.Response:
    """The function's package, as uploaded."""
    found = await _function(request)
    data = await registry.read_package(_store(request), found)
    file_name = found.record["package"]["file"]
    return web.Response(
        body=data,
        content_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{file_name}"'},
    )


def register(router: web.UrlDispatcher) -> None:
    ns = f"{V3}/{{tenant}}/{{namespace}}"
    fn = f"{ns}/{{name}}"
    one = f"{fn}/{{instanceId:\\d+}}"
    router.add_get(ns, list_functions)
    router.add_post(fn, create_function)
    router.add_put(fn, update_function)
    router.add_get(fn, get_function)
    router.add_delete(fn, delete_function)
    router.add_get(f"{fn}/download", download_function)
    router.add_post(f"{fn}/trigger", trigger_function)
    router.add_get(f"{fn}/state/{{key}}", get_state)
    router.add_post(f"{fn}/state/{{key}}", put_state)
    router.add_delete(f"{fn}/state/{{key}}", delete_state)
    router.add_get(f"{fn}/status", function_status)
    router.add_get(f"{fn}/stats", function_stats)
    router.add_post(f"{fn}/start", start_function)
    router.add_post(f"{fn}/stop", stop_function)
    router.add_post(f"{fn}/restart", restart_function)
    router.add_get(f"{one}/status", instance_status)
    router.add_get(f"{one}/stats", instance_stats)
    router.add_post(f"{one}/start", start_instance)
    router.add_post(f"{one}/stop", stop_instance)
    router.add_post(f"{one}/restart", restart_instance)


async def instance_status(request: web.Request) -> web.Response:
    """One instance's FunctionInstanceStatusData."""
    return await function_status(request)


async def instance_stats(request: web.Request) -> web.Response:
    """One instance's FunctionInstanceStatsDataImpl."""
    return await function_stats(request)


async def start_instance(request: web.Request) -> web.Response:
    """Start one instance of the function."""
    return await start_function(request)


async def stop_instance(request: web.Request) -> web.Response:
    """Stop one instance of the function."""
    return await stop_function(request)


async def restart_instance(request: web.Request) -> web.Response:
    """Restart one instance of the function."""
    return await restart_function(request)
