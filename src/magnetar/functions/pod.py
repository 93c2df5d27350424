"""One function instance in a pod of the Kubernetes ``Function`` resource: ``python -m
magnetar.functions.pod``, the command of the StatefulSet the operator builds
(``operator/magnetar_operator/builders/function.py``; docs/functions.md, "On Kubernetes").

Everything comes from the environment the operator sets:

* ``POD_NAME``: the instance id is the pod's ordinal (``<statefulset>-<ordinal>``);
* ``MAGNETAR_FUNCTION_CONFIG``: Pulsar's ``FunctionConfig`` (JSON), checked and defaulted
  here as the admin API does (:func:`magnetar.functions.config.check`);
* ``MAGNETAR_FUNCTION_PACKAGE``: ``tenant/namespace/name`` of the function whose package the
  broker serves (``GET /admin/v3/functions/{tenant}/{namespace}/{name}/download``);
* ``MAGNETAR_SERVICE_URL``, ``MAGNETAR_WEB_SERVICE_URL``: the brokers;
* ``MAGNETAR_TLS_TRUST_CERTS``, ``MAGNETAR_AUTH_TOKEN_FILE``: a secured cluster's CA
  certificate and token (files the pod mounts);
* ``MAGNETAR_FUNCTION_SECRETS``: secret name -> the env var holding its value (the
  resource's ``secretsMap``, from Kubernetes Secrets), what ``context.get_secret`` returns;
* ``MAGNETAR_FUNCTION_WORK_DIR``: where the package goes (an emptyDir).

The package is downloaded (retried while the brokers do not answer yet, at most
``FETCH_ATTEMPTS`` times, the shared jittered backoff apart), installed as the
standalone's supervisor installs it (:func:`magnetar.functions.supervisor.install_package`),
and this process becomes the instance (``exec`` of :mod:`.instance`): its exit is the
container's, which the kubelet restarts. A configuration or package error exits at once
with a message naming it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from magnetar.client import admin
from magnetar.common.backoff import Backoff
from magnetar.functions import config as fconfig
from magnetar.functions.config import FunctionName
from magnetar.functions.supervisor import PackageError, install_package
from magnetar.security.client_auth import Credentials

log = logging.getLogger("magnetar.functions.pod")

TOKEN_PLUGIN: Final = "org.apache.pulsar.client.impl.auth.AuthenticationToken"  # noqa: S105
FETCH_ATTEMPTS: Final = 30
FETCH_BACKOFF_S: Final = (1.0, 10.0)
"""The download's retries wait the shared jittered backoff, from 1 s up to 10 s apart."""


class PodConfigError(Exception):
    """The pod's environment does not say what to run (exit 2, the message names it)."""


def _required(env: Mapping[str, str], key: str) -> str:
    value = env.get(key, "")
    if not value:
        raise PodConfigError(f"{key} is not set")
    return value


def instance_id(pod_name: str) -> int:
    """The StatefulSet ordinal at the end of the pod's name."""
    _, _, ordinal = pod_name.rpartition("-")
    if not ordinal.isdigit():
        raise PodConfigError(f"POD_NAME {pod_name!r} does not end with a StatefulSet ordinal")
    return int(ordinal)


def function_name(text: str, what: str) -> FunctionName:
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise PodConfigError(f"{what} {text!r}: expected tenant/namespace/name")
    return FunctionName(*parts)


def load_config(env: Mapping[str, str]) -> dict[str, Any]:
    """The checked ``FunctionConfig``, with the secrets' values filled in."""
    try:
        raw = json.loads(_required(env, "MAGNETAR_FUNCTION_CONFIG"))
    except ValueError as err:
        raise PodConfigError(f"MAGNETAR_FUNCTION_CONFIG is not JSON: {err}") from None
    if not isinstance(raw, dict):
        raise PodConfigError("MAGNETAR_FUNCTION_CONFIG must be a JSON object")
    secrets: dict[str, str] = {}
    for secret, var in json.loads(env.get("MAGNETAR_FUNCTION_SECRETS") or "{}").items():
        if var not in env:
            raise PodConfigError(f"secret {secret!r}: {var} is not set")
        secrets[str(secret)] = env[var]
    raw["secrets"] = secrets
    name = FunctionName(
        str(raw.get("tenant", "")), str(raw.get("namespace", "")), str(raw.get("name", ""))
    )
    try:
        return fconfig.check(raw, name=name, package_file=raw.get("py"))
    except fconfig.ConfigError as err:
        raise PodConfigError(str(err)) from None


def admin_client(env: Mapping[str, str]) -> admin.AdminClient:
    token_file = env.get("MAGNETAR_AUTH_TOKEN_FILE")
    return admin.AdminClient(
        _required(env, "MAGNETAR_WEB_SERVICE_URL"),
        credentials=Credentials(method="token", token_file=Path(token_file))
        if token_file
        else None,
        tls_trust_certs_file=env.get("MAGNETAR_TLS_TRUST_CERTS") or None,
        timeout=60.0,
    )


def download(client: admin.AdminClient, source: FunctionName) -> bytes:
    """The package, as the broker stores it; retried while the brokers are unreachable or
    answer 5xx (a pod may start before them), not on a 4xx (no such function: the error)."""
    path = f"/admin/v3/functions/{source.fqfn}/download"
    backoff = Backoff(initial_s=FETCH_BACKOFF_S[0], max_s=FETCH_BACKOFF_S[1])
    for attempt in range(1, FETCH_ATTEMPTS + 1):
        try:
            data = client.get(path, raw=True)
            assert isinstance(data, bytes)
            return data
        except admin.AdminError as err:
            if err.status < 500 or attempt == FETCH_ATTEMPTS:
                raise PodConfigError(
                    f"cannot download the package of {source.fqfn}: {err}"
                ) from None
            log.warning("downloading %s (attempt %d): %s", source.fqfn, attempt, err)
        except admin.AdminUnreachable as err:
            if attempt == FETCH_ATTEMPTS:
                raise PodConfigError(
                    f"cannot download the package of {source.fqfn}: {err}"
                ) from None
            log.warning("downloading %s (attempt %d): %s", source.fqfn, attempt, err)
        time.sleep(backoff.next())
    raise AssertionError("unreachable")


def access(env: Mapping[str, str]) -> dict[str, Any]:
    """The instance's ``access`` (:func:`magnetar.functions.instance.access`): the cluster's
    CA, checking the brokers' hostnames (their certificates name their Service), and the
    token file, read again at each use."""
    trust = env.get("MAGNETAR_TLS_TRUST_CERTS") or None
    token_file = env.get("MAGNETAR_AUTH_TOKEN_FILE") or None
    return {
        "authPlugin": TOKEN_PLUGIN if token_file else None,
        "authParams": f"file://{token_file}" if token_file else "",
        "tlsTrustCertsFile": trust,
        "tlsHostnameVerification": trust is not None,
    }


def prepare(env: Mapping[str, str]) -> Path:
    """Everything before the instance runs; returns its spec file."""
    instance = instance_id(_required(env, "POD_NAME"))
    config = load_config(env)
    source = function_name(_required(env, "MAGNETAR_FUNCTION_PACKAGE"), "MAGNETAR_FUNCTION_PACKAGE")
    if instance >= int(config["parallelism"]):
        raise PodConfigError(f"instance {instance} is beyond parallelism {config['parallelism']}")
    work = Path(env.get("MAGNETAR_FUNCTION_WORK_DIR") or "/tmp/function")  # noqa: S108
    work.mkdir(parents=True, exist_ok=True)
    # the pod's readiness probe looks for the instance's report: none from a previous run
    (work / "metrics.json").unlink(missing_ok=True)
    data = download(admin_client(env), source)
    try:
        code, paths = asyncio.run(
            install_package(str(config["py"]), str(config["className"]), data, work / "package")
        )
    except PackageError as err:
        raise PodConfigError(f"package of {source.fqfn}: {err}") from None
    fqfn = f"{config['tenant']}/{config['namespace']}/{config['name']}"
    spec = {
        "config": config,
        "instanceId": instance,
        "functionId": f"{fqfn}@{env.get('POD_NAME')}",
        "functionVersion": hashlib.sha256(data).hexdigest()[:12],
        "code": str(code),
        "paths": paths,
        "serviceUrl": _required(env, "MAGNETAR_SERVICE_URL"),
        "webServiceUrl": env["MAGNETAR_WEB_SERVICE_URL"],
        "reportFile": str(work / "metrics.json"),
        "access": access(env),
    }
    spec_file = work / "spec.json"
    spec_file.write_text(json.dumps(spec))
    log.info("function %s instance %d: package from %s ready", fqfn, instance, source.fqfn)
    return spec_file


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("MAGNETAR_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        spec_file = prepare(os.environ)
    except PodConfigError as err:
        print(f"magnetar function pod: {err}", file=sys.stderr)
        return 2
    argv = [sys.executable, "-m", "magnetar.functions.instance", "--spec", str(spec_file)]
    os.execv(sys.executable, argv)  # noqa: S606  (becomes the instance)


if __name__ == "__main__":
    sys.exit(main())
