"""One ``magnetar standalone`` per module for the admin API suites, and a small JSON client."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pulsar
import pytest

from tests.support import standalone as standalone_procs
from tests.support.standalone import StandaloneProc


class Admin:
    """Speaks to ``/admin/v2``; returns (status, decoded JSON body or None)."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/") + "/admin/v2"

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                text = r.read()
                return r.status, (json.loads(text) if text else None)
        except urllib.error.HTTPError as err:
            text = err.read()
            try:
                return err.code, json.loads(text)
            except ValueError:
                return err.code, text

    def get(self, path: str):
        return self.call("GET", path)

    def put(self, path: str, body: Any = None):
        return self.call("PUT", path, body)

    def post(self, path: str, body: Any = None):
        return self.call("POST", path, body)

    def delete(self, path: str):
        return self.call("DELETE", path)


INTERNAL_ERROR_LOG = "admin: internal error answering"
"""What the admin API logs with every 500 (magnetar.broker.admin.common.INTERNAL_ERROR_LOG)."""


def assert_no_internal_errors(proc: StandaloneProc) -> None:
    """Bad input never reaches the catch-all: the broker's log has no admin 500."""
    log = proc.proc.log_path.read_text(errors="replace")
    assert INTERNAL_ERROR_LOG not in log, log[log.index(INTERNAL_ERROR_LOG) - 200 :][:3000]


FORCE_DELETE_CONF = "forceDeleteTenantAllowed=true\nforceDeleteNamespaceAllowed=true\n"
"""standalone.conf of the suites that force-delete tenants and namespaces (Pulsar and
Magnetar refuse forced deletes by default: test_force_delete.py)."""


def running_standalone(
    tmp_path_factory: pytest.TempPathFactory, name: str, extra_args: Sequence[str] = ()
) -> Iterator[StandaloneProc]:
    """A module fixture's body: a standalone in a fresh directory, checked for admin 500s
    and stopped by pid at the end."""
    data_dir = tmp_path_factory.mktemp(name) / "data"
    with standalone_procs.running(data_dir, extra_args=extra_args) as proc:
        yield proc
        assert_no_internal_errors(proc)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProc]:
    conf = tmp_path_factory.mktemp("admin-conf") / "standalone.conf"
    conf.write_text(FORCE_DELETE_CONF)
    yield from running_standalone(tmp_path_factory, "admin", ["--config", str(conf)])


@pytest.fixture
def admin(standalone: StandaloneProc) -> Admin:
    return Admin(standalone.http_url)


@pytest.fixture
def client(standalone: StandaloneProc) -> Iterator[pulsar.Client]:
    with standalone_procs.client(standalone) as c:
        yield c
