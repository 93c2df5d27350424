"""An in-test Pulsar admin REST API v2 server (tenants, namespaces, topics, a few policies).

INTERIM TEST DOUBLE: Magnetar's broker will serve these endpoints; until it exists, the
operator's admin client and the Tenant/Topic handlers are tested against this faithful
subset (Pulsar's paths, JSON shapes and status codes). Once ``magnetar standalone`` serves
the admin API, the same tests run against it and this file goes.

Runs in the test's event loop (``await start()``) or in a thread of its own
(``start_in_thread()``, for the control-plane tests that drive a separate operator process).
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support.procs import LOOPBACK, free_port

Json = dict[str, Any]


def _err(status: int, reason: str) -> web.Response:
    return web.json_response({"reason": reason}, status=status)


@dataclass
class State:
    clusters: set[str] = field(default_factory=lambda: {"standalone"})
    tenants: dict[str, Json] = field(default_factory=dict)
    namespaces: dict[str, Json] = field(default_factory=dict)  # "t/ns" -> policies
    topics: dict[str, int] = field(default_factory=dict)  # full name -> partitions (0: none)
    topic_policies: dict[str, Json] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)


def _policies() -> Json:
    return {
        "retention_policies": None,
        "message_ttl_in_seconds": None,
        "deduplicationEnabled": None,
        "backlog_quota_map": {},
        "offload_threshold": -1,
    }


class FakeAdmin:
    def __init__(self) -> None:
        self.state = State()
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle ---------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        r = app.router
        r.add_get("/admin/v2/tenants", self.list_tenants)
        r.add_route("*", "/admin/v2/tenants/{t}", self.tenant)
        r.add_get("/admin/v2/namespaces/{t}", self.list_namespaces)
        r.add_route("*", "/admin/v2/namespaces/{t}/{ns}", self.namespace)
        r.add_route("*", "/admin/v2/namespaces/{t}/{ns}/{policy}", self.ns_policy)
        r.add_get("/admin/v2/{d}/{t}/{ns}", self.list_topics)
        r.add_get("/admin/v2/{d}/{t}/{ns}/partitioned", self.list_partitioned)
        r.add_route("*", "/admin/v2/{d}/{t}/{ns}/{topic}", self.topic)
        r.add_route("*", "/admin/v2/{d}/{t}/{ns}/{topic}/partitions", self.partitions)
        r.add_route("*", "/admin/v2/{d}/{t}/{ns}/{topic}/{policy}", self.topic_policy)
        return app

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.state.calls.append(f"{request.method} {request.path}")
        resp: web.StreamResponse = await handler(request)
        return resp

    async def start(self) -> FakeAdmin:
        self._runner = web.AppRunner(self.app())
        await self._runner.setup()
        await web.TCPSite(self._runner, LOOPBACK, self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start_in_thread(self) -> FakeAdmin:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-admin", daemon=True)
        self._thread.start()
        assert ready.wait(10), "fake admin server did not start"
        return self

    def stop_thread(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    # --- helpers -----------------------------------------------------------------------
    @staticmethod
    async def _body(request: web.Request) -> Any:
        text = await request.text()
        return json.loads(text) if text.strip() else None

    def _full(self, request: web.Request) -> str:
        m = request.match_info
        return f"{m['d']}://{m['t']}/{m['ns']}/{m['topic']}"

    def _ns_key(self, request: web.Request) -> str:
        return f"{request.match_info['t']}/{request.match_info['ns']}"

    # --- tenants -----------------------------------------------------------------------
    async def list_tenants(self, request: web.Request) -> web.Response:
        return web.json_response(sorted(self.state.tenants))

    async def tenant(self, request: web.Request) -> web.Response:
        t = request.match_info["t"]
        st = self.state
        if request.method == "GET":
            if t not in st.tenants:
                return _err(404, "Tenant does not exist")
            return web.json_response(st.tenants[t])
        if request.method in ("PUT", "POST"):
            info = await self._body(request) or {}
            clusters = info.get("allowedClusters") or []
            if any(c not in st.clusters for c in clusters):
                return _err(412, "Clusters do not exist")
            if request.method == "PUT" and t in st.tenants:
                return _err(409, "Tenant already exists")
            if request.method == "POST" and t not in st.tenants:
                return _err(404, "Tenant does not exist")
            st.tenants[t] = {
                "adminRoles": list(info.get("adminRoles") or []),
                "allowedClusters": list(clusters),
            }
            return web.Response(status=204)
        if request.method == "DELETE":
            if t not in st.tenants:
                return _err(404, "Tenant does not exist")
            owned = [k for k in st.namespaces if k.startswith(f"{t}/")]
            if owned and request.query.get("force") != "true":
                return _err(409, "The tenant still has active namespaces")
            for k in owned:
                self._drop_namespace(k)
            del st.tenants[t]
            return web.Response(status=204)
        return _err(405, "method not allowed")

    # --- namespaces --------------------------------------------------------------------
    async def list_namespaces(self, request: web.Request) -> web.Response:
        t = request.match_info["t"]
        if t not in self.state.tenants:
            return _err(404, "Tenant does not exist")
        return web.json_response(sorted(k for k in self.state.namespaces if k.startswith(f"{t}/")))

    def _drop_namespace(self, key: str) -> None:
        for name in [n for n in self.state.topics if n.split("://", 1)[1].startswith(f"{key}/")]:
            self.state.topics.pop(name)
            self.state.topic_policies.pop(name, None)
        self.state.namespaces.pop(key, None)

    async def namespace(self, request: web.Request) -> web.Response:
        key = self._ns_key(request)
        st = self.state
        if request.match_info["t"] not in st.tenants:
            return _err(404, "Tenant does not exist")
        if request.method == "GET":
            if key not in st.namespaces:
                return _err(404, "Namespace does not exist")
            return web.json_response(st.namespaces[key])
        if request.method == "PUT":
            if key in st.namespaces:
                return _err(409, "Namespace already exists")
            st.namespaces[key] = _policies()
            return web.Response(status=204)
        if request.method == "DELETE":
            if key not in st.namespaces:
                return _err(404, "Namespace does not exist")
            has_topics = any(n.split("://", 1)[1].startswith(f"{key}/") for n in st.topics)
            if has_topics and request.query.get("force") != "true":
                return _err(409, "Cannot delete non empty namespace")
            self._drop_namespace(key)
            return web.Response(status=204)
        return _err(405, "method not allowed")

    async def ns_policy(self, request: web.Request) -> web.Response:
        key = self._ns_key(request)
        if key not in self.state.namespaces:
            return _err(404, "Namespace does not exist")
        pol = self.state.namespaces[key]
        policy = request.match_info["policy"]
        value = await self._body(request)
        if policy == "retention" and request.method == "POST":
            pol["retention_policies"] = {
                "retentionTimeInMinutes": int(value["retentionTimeInMinutes"]),
                "retentionSizeInMB": int(value["retentionSizeInMB"]),
            }
        elif policy == "messageTTL" and request.method == "POST":
            pol["message_ttl_in_seconds"] = int(value)
        elif policy == "deduplication" and request.method == "POST":
            pol["deduplicationEnabled"] = bool(value)
        elif policy == "backlogQuota" and request.method == "POST":
            kind = request.query.get("backlogQuotaType", "destination_storage")
            pol["backlog_quota_map"][kind] = {
                "limitSize": int(value.get("limitSize", -1)),
                "limitTime": int(value.get("limitTime", -1)),
                "policy": str(value["policy"]),
            }
        elif policy == "offloadThreshold" and request.method == "PUT":
            pol["offload_threshold"] = int(value)
        else:
            return _err(405, f"{request.method} {policy} not supported by the fake")
        return web.Response(status=204)

    # --- topics ------------------------------------------------------------------------
    def _ns_exists(self, request: web.Request) -> bool:
        return self._ns_key(request) in self.state.namespaces

    async def list_topics(self, request: web.Request) -> web.Response:
        if not self._ns_exists(request):
            return _err(404, "Namespace does not exist")
        m = request.match_info
        prefix = f"{m['d']}://{m['t']}/{m['ns']}/"
        out: list[str] = []
        for name, parts in sorted(self.state.topics.items()):
            if name.startswith(prefix):
                out += [f"{name}-partition-{i}" for i in range(parts)] if parts else [name]
        return web.json_response(out)

    async def list_partitioned(self, request: web.Request) -> web.Response:
        if not self._ns_exists(request):
            return _err(404, "Namespace does not exist")
        m = request.match_info
        prefix = f"{m['d']}://{m['t']}/{m['ns']}/"
        return web.json_response(
            sorted(n for n, p in self.state.topics.items() if n.startswith(prefix) and p)
        )

    async def topic(self, request: web.Request) -> web.Response:
        if not self._ns_exists(request):
            return _err(404, "Namespace does not exist")
        name = self._full(request)
        st = self.state
        if request.method == "PUT":
            if name in st.topics:
                return _err(409, "This topic already exists")
            st.topics[name] = 0
            return web.Response(status=204)
        if request.method == "DELETE":
            if st.topics.get(name, -1) != 0:
                return _err(404, "Topic not found")
            del st.topics[name]
            st.topic_policies.pop(name, None)
            return web.Response(status=204)
        return _err(405, "method not allowed")

    async def partitions(self, request: web.Request) -> web.Response:
        if not self._ns_exists(request):
            return _err(404, "Namespace does not exist")
        name = self._full(request)
        st = self.state
        if request.method == "GET":
            return web.json_response({"partitions": st.topics.get(name, 0)})
        if request.method in ("PUT", "POST"):
            n = int(await self._body(request))
            if n <= 0:
                return _err(406, "The number of partitions should be more than 0")
            if request.method == "PUT":
                if name in st.topics:
                    return _err(409, "This topic already exists")
            elif not st.topics.get(name):
                return _err(404, "Partitioned topic does not exist")
            elif n <= st.topics[name]:
                return _err(409, "Number of partitions must be more than the existing number")
            st.topics[name] = n
            return web.Response(status=204)
        if request.method == "DELETE":
            if not st.topics.get(name):
                return _err(404, "Partitioned topic does not exist")
            del st.topics[name]
            st.topic_policies.pop(name, None)
            return web.Response(status=204)
        return _err(405, "method not allowed")

    async def topic_policy(self, request: web.Request) -> web.Response:
        name = self._full(request)
        if name not in self.state.topics:
            return _err(404, "Topic not found")
        policy = request.match_info["policy"]
        if policy not in ("messageTTL", "retention", "deduplicationEnabled"):
            return _err(405, f"{policy} not supported by the fake")
        pols = self.state.topic_policies.setdefault(name, {})
        if request.method == "GET":
            return web.json_response(pols.get(policy))
        if request.method == "POST":
            if policy == "messageTTL":
                pols[policy] = int(request.query["messageTTL"])
            else:
                pols[policy] = await self._body(request)
            return web.Response(status=204)
        if request.method == "DELETE":
            pols.pop(policy, None)
            return web.Response(status=204)
        return _err(405, "method not allowed")
