"""Function instances as supervised child processes (the runtime of ``magnetar standalone``).

Every second the supervisor reads the function records (:mod:`.registry`) and makes the
children match them: an instance that should run and does not is started
(``python -m magnetar.functions.instance``, its package written under the work directory
first); one whose function was deleted, stopped, updated or restarted is stopped (SIGTERM,
then SIGKILL after a grace period) and, unless stopped, started again; one that exited on its
own is restarted after a backoff (1 s doubling to 30 s), its restarts counted and the end of
its log kept as the error its status reports. A ``.zip`` package is extracted and its
``requirements.txt`` installed into a folder of its own per package version, before the
first instance of that version starts; a ``.whl`` package is installed there the same way
(``pip install --target``, with the distributions it requires). Each instance's log is
``WORK/<tenant>/<namespace>/<name>/<instance>/instance.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import signal
import sys
import time
import urllib.parse
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import magnetar
from magnetar.functions import config as fconfig
from magnetar.functions import registry
from magnetar.functions.config import FunctionName
from magnetar.functions.runtime import InstanceState
from magnetar.metadata import api

log = logging.getLogger(__name__)

POLL_INTERVAL_S: Final = 1.0
STOP_GRACE_S: Final = 10.0
MIN_BACKOFF_S: Final = 1.0
MAX_BACKOFF_S: Final = 30.0
LOG_TAIL_BYTES: Final = 2000
PIP_TIMEOUT_S: Final = 300.0
SOURCE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(magnetar.__file__)))
"""Where ``magnetar`` is imported from: put on the children's PYTHONPATH."""


class PackageError(Exception):
    """A package that cannot be put on disk or whose requirements cannot be installed."""


@dataclass(frozen=True, slots=True)
class BrokerAccess:
    """How instances reach the broker when it is secured: the broker's own client settings
    (``brokerClientAuthenticationPlugin`` / ``...Parameters``, ``brokerClientTrustCertsFilePath``
    or ``tlsTrustCertsFilePath``, ``tlsHostnameVerificationEnabled``), as Pulsar's functions
    worker gives its instances the broker client's credentials."""

    auth_plugin: str | None = None
    auth_params: str = ""
    trust_certs_file: str | None = None
    verify_hostname: bool = False

    def spec(self) -> dict[str, Any]:
        """The instance spec's ``access`` (read by :func:`magnetar.functions.instance.access`)."""
        return {
            "authPlugin": self.auth_plugin,
            "authParams": self.auth_params,
            "tlsTrustCertsFile": self.trust_certs_file,
            "tlsHostnameVerification": self.verify_hostname,
        }


@dataclass(slots=True)
class Child:
    """One instance's process and what the supervisor knows of it."""

    name: FunctionName
    instance: int
    directory: Path
    generation: tuple[Any, ...] = ()
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    error: str = ""
    backoff_s: float = MIN_BACKOFF_S
    next_start: float = 0.0
    started_at: float = 0.0
    stopped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def report_file(self) -> Path:
        return self.directory / "metrics.json"

    @property
    def log_file(self) -> Path:
        return self.directory / "instance.log"


def _segment(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _log_tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _read_ready(ready: Path) -> tuple[Path, list[str]] | None:
    if not ready.exists():
        return None
    done = json.loads(ready.read_text())
    return Path(done["code"]), list(done["paths"])


def _unpack(
    file_name: str, class_name: str, data: bytes, code_dir: Path
) -> tuple[Path, list[str], tuple[str, list[str]] | None]:
    """Write a package version's files: (the module, the ``sys.path`` entries -- the
    module's own folder first --, what ``pip install --target`` must install: the file named in
    errors and pip's arguments, or None)."""
    code_dir.mkdir(parents=True, exist_ok=True)
    site = code_dir / "site"
    if file_name.endswith(".whl"):
        try:
            module_file = fconfig.wheel_layout(data, file_name=file_name, class_name=class_name)
        except fconfig.ConfigError as err:
            raise PackageError(str(err)) from None
        wheel = code_dir / file_name
        wheel.write_bytes(data)
        # the wheel and what it requires, into the version's own folder
        return site / module_file, [str(site)], (file_name, [str(wheel)])
    if not file_name.endswith(".zip"):
        code = code_dir / file_name
        code.write_bytes(data)
        return code, [str(code_dir)], None
    try:
        layout = fconfig.zip_layout(data, file_name=file_name, class_name=class_name)
    except fconfig.ConfigError as err:
        raise PackageError(str(err)) from None
    files = code_dir / "files"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(files)
    paths = [str(files / layout.source_dir), str(site)]
    install = None
    if layout.requirements:
        requirements = files / layout.requirements
        args = ["-r", str(requirements)]
        if layout.deps_dir is not None:
            args += ["--find-links", str(files / layout.deps_dir)]
        install = (requirements.name, args)
    return files / layout.module_file, paths, install


class Supervisor:
    """The standalone's function runtime (a :class:`magnetar.functions.runtime.Runtime`)."""

    stats_unavailable: str | None = None

    def __init__(
        self,
        store: api.MetadataStore,
        *,
        work_dir: Path,
        worker_id: str,
        poll_interval_s: float = POLL_INTERVAL_S,
        access: BrokerAccess | None = None,
    ) -> None:
        self.store = store
        self.access = access or BrokerAccess()
        self.work_dir = work_dir
        self.worker_id = worker_id
        self.poll_interval_s = poll_interval_s
        self.service_url = ""
        self.web_service_url = ""
        self.children: dict[tuple[str, int], Child] = {}
        self._task: asyncio.Task[None] | None = None

    # --- the Runtime protocol ----------------------------------------------------------------

    def instances(self, name: FunctionName, parallelism: int) -> dict[int, InstanceState]:
        out = {}
        for i in range(parallelism):
            child = self.children.get((name.fqfn, i))
            if child is None:
                out[i] = InstanceState(
                    running=False, error="not started yet", worker_id=self.worker_id
                )
                continue
            report: dict[str, Any] = {}
            with contextlib.suppress(OSError, ValueError):
                report = json.loads(child.report_file.read_text())
            out[i] = InstanceState(
                running=child.running,
                error="" if child.running or child.stopped else child.error,
                restarts=child.restarts,
                worker_id=self.worker_id,
                report=report,
            )
        return out

    # --- life cycle -----------------------------------------------------------------------------

    def start(self, *, service_url: str, web_service_url: str) -> None:
        self.service_url = service_url
        self.web_service_url = web_service_url
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.create_task(self._loop(), name="functions-supervisor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.gather(*(self._stop_child(c) for c in self.children.values()))

    async def _loop(self) -> None:
        while True:
            try:
                await self.reconcile()
            except api.StoreUnavailableError as err:
                log.warning("functions: metadata store unavailable: %s", err)
            except Exception:
                log.exception("functions: reconcile failed")
            await asyncio.sleep(self.poll_interval_s)

    async def reconcile(self) -> None:
        """One round: make the children match the function records."""
        functions = {f.name.fqfn: f for f in await registry.all_functions(self.store)}
        for key, child in list(self.children.items()):
            fqfn, instance = key
            function = functions.get(fqfn)
            if function is None or instance >= function.parallelism:
                await self._stop_child(child)
                del self.children[key]
                if function is None:
                    shutil.rmtree(child.directory.parent, ignore_errors=True)
        for fqfn, function in functions.items():
            for instance in range(function.parallelism):
                try:
                    await self._reconcile_instance(fqfn, function, instance)
                except (api.MetadataError, OSError) as err:  # this instance only; next round
                    failed = self.children.get((fqfn, instance))
                    if failed is not None:
                        failed.error = f"cannot start: {type(err).__name__}: {err}"
                    log.warning("function %s instance %d: %s", fqfn, instance, err)

    async def _reconcile_instance(
        self, fqfn: str, function: registry.Function, instance: int
    ) -> None:
        config_hash = hashlib.sha256(
            json.dumps(function.config, sort_keys=True).encode()
        ).hexdigest()
        generation = (
            function.record["package"]["version"],
            config_hash,
            function.restarts(instance),
        )
        key = (fqfn, instance)
        child = self.children.get(key)
        if child is None:
            name = function.name
            directory = (
                self.work_dir
                / _segment(name.tenant)
                / _segment(name.namespace)
                / _segment(name.name)
                / str(instance)
            )
            child = self.children[key] = Child(name, instance, directory)
        if instance in function.stopped:
            if child.running:
                await self._stop_child(child)
            child.stopped = True
            child.generation = ()
            return
        child.stopped = False
        if child.running and child.generation != generation:
            await self._stop_child(child)
            if child.generation[2:] != generation[2:]:
                child.restarts += 1
            child.next_start = 0.0
            child.backoff_s = MIN_BACKOFF_S
        if child.running:
            if time.monotonic() - child.started_at > MAX_BACKOFF_S:
                child.backoff_s = MIN_BACKOFF_S
            return
        if child.process is not None and child.process.returncode is not None:
            # exited on its own: count it, keep why, start again after the backoff
            code = child.process.returncode
            child.process = None
            child.restarts += 1
            child.error = f"exited with code {code}: {_log_tail(child.log_file)}"
            child.next_start = time.monotonic() + child.backoff_s
            child.backoff_s = min(child.backoff_s * 2, MAX_BACKOFF_S)
            log.warning("function %s instance %d %s", fqfn, instance, child.error)
        if time.monotonic() < child.next_start:
            return
        await self._start_child(child, function, generation)

    async def _start_child(
        self, child: Child, function: registry.Function, generation: tuple[Any, ...]
    ) -> None:
        package = function.record["package"]
        code_dir = child.directory.parent / f"package-{package['version']}"
        try:
            code, paths = await self._prepare(function, code_dir)
        except PackageError as err:
            child.error = str(err)
            child.next_start = time.monotonic() + child.backoff_s
            child.backoff_s = min(child.backoff_s * 2, MAX_BACKOFF_S)
            log.warning("function %s: %s", function.name.fqfn, err)
            return
        child.directory.mkdir(parents=True, exist_ok=True)
        spec = {
            "config": function.config,
            "instanceId": child.instance,
            "functionId": f"{function.name.fqfn}@{function.record.get('createTime', 0)}",
            "functionVersion": str(package["version"]),
            "code": str(code),
            "paths": paths,
            "serviceUrl": self.service_url,
            "webServiceUrl": self.web_service_url,
            "access": self.access.spec(),
            "reportFile": str(child.report_file),
        }
        spec_file = child.directory / "spec.json"
        # the broker client's credentials are in it: readable by this user only
        spec_file.touch(mode=0o600)
        spec_file.chmod(0o600)
        spec_file.write_text(json.dumps(spec))
        env = dict(os.environ)
        source_root = SOURCE_ROOT
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (source_root, env.get("PYTHONPATH", "")) if p
        )
        with child.log_file.open("ab") as out:
            child.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "magnetar.functions.instance",
                "--spec",
                str(spec_file),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                cwd=str(child.directory),
                env=env,
                start_new_session=True,
            )
        child.generation = generation
        child.started_at = time.monotonic()
        log.info(
            "function %s instance %d started (pid %d)",
            function.name.fqfn,
            child.instance,
            child.process.pid,
        )

    async def _prepare(self, function: registry.Function, code_dir: Path) -> tuple[Path, list[str]]:
        """The package on disk, once per version: a ``.py`` as it is; a ``.zip`` extracted
        and its ``requirements.txt`` installed into the version's own folder (``pip install
        --target``, from its ``deps/`` wheels first); a ``.whl`` installed there with what it
        requires: the module's path and what goes on ``sys.path``. PackageError says what
        failed (the instance is tried again later)."""
        ready = code_dir / "ready.json"
        done = await asyncio.to_thread(_read_ready, ready)
        if done is not None:
            return done
        data = await registry.read_package(self.store, function)
        code, paths = await install_package(
            function.record["package"]["file"], function.config["className"], data, code_dir
        )
        await asyncio.to_thread(ready.write_text, json.dumps({"code": str(code), "paths": paths}))
        return code, paths

    async def _stop_child(self, child: Child) -> None:
        process = child.process
        if process is None or process.returncode is not None:
            child.process = None
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        child.process = None


async def install_package(
    file_name: str, class_name: str, data: bytes, code_dir: Path
) -> tuple[Path, list[str]]:
    """A package's files under ``code_dir`` (:func:`_unpack`), and what it needs installed
    with ``pip install --target`` into its ``site`` folder: the module's path and what goes
    on ``sys.path``; PackageError says what failed. Also what a pod of the Kubernetes
    ``Function`` resource runs at start (:mod:`.pod`)."""
    code, paths, install = await asyncio.to_thread(_unpack, file_name, class_name, data, code_dir)
    if install is not None:
        await _pip_install(install[0], install[1], code_dir / "site")
    return code, paths


async def _pip_install(package: str, what: list[str], target: Path) -> None:
    argv = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--no-input", "--target", str(target), *what,
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), PIP_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise PackageError(f"installing {package} took over {PIP_TIMEOUT_S:g} s") from None
    if process.returncode != 0:
        lines = output.decode(errors="replace").strip().splitlines()
        why = lines[-1] if lines else f"pip exited with {process.returncode}"
        raise PackageError(f"installing {package} failed: {why}")
