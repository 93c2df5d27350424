"""The systems under test: Apache Pulsar standalone, pulsar-lite, Magnetar standalone.

Each is installed by the repo's scripts (cached under .cache/), started fresh on loopback
ports picked at run time with an empty data directory, polled until it serves, and stopped
by its pid (SIGTERM, then SIGKILL after a grace period). A system that cannot be installed
or started raises ``StartError`` with the reason; the harness reports it, never skips it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from magnetar.common.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "bench" / "peers"
VENV_BIN = Path(sys.executable).parent


class StartError(Exception):
    """The system could not be installed or did not come up."""


def die_with_parent() -> None:
    # The broker dies with the harness (PR_SET_PDEATHSIG): a killed run leaves nothing behind.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _tcp_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def git_head() -> str:
    """The short commit the checkout is at ("" outside a git checkout)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


class System:
    name = "?"
    key = "?"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{self.key}.log"
        self.url = ""
        self.version = "?"
        self.install_seconds = 0.0
        self.startup_seconds = 0.0
        self.notes: list[str] = []

    # --- to override ------------------------------------------------------------------
    def install(self) -> None:
        raise NotImplementedError

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    startup_timeout = 120.0
    poll_interval = 0.2
    """Seconds between readiness probes: ``startup_seconds`` is late by up to this much."""

    # --- common -----------------------------------------------------------------------
    def start(self) -> str:
        data = self.workdir / f"{self.key}-data"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        self.data_dir = data
        argv, env, cwd = self.argv()
        log = open(self.log_path, "ab")
        log.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        log.flush()
        t0 = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env={**os.environ, **env},
                preexec_fn=die_with_parent,
            )
        except OSError as err:
            raise StartError(f"{argv[0]}: {err}") from err
        finally:
            log.close()
        deadline = t0 + self.startup_timeout
        while not self.ready():
            if self.proc.poll() is not None:
                reason = f"exited with status {self.proc.returncode}"
                self.proc = None
                raise StartError(f"{reason}; log tail:\n{_tail(self.log_path)}")
            if time.monotonic() > deadline:
                self.stop()
                raise StartError(
                    f"not ready within {self.startup_timeout:.0f} s; log tail:\n"
                    f"{_tail(self.log_path)}"
                )
            time.sleep(self.poll_interval)
        self.startup_seconds = time.monotonic() - t0
        return self.url

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        data = getattr(self, "data_dir", None)
        if data is not None:
            shutil.rmtree(data, ignore_errors=True)

    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def server_pids(self) -> list[int]:
        """The system's own processes (their children are counted with them)."""
        return [self.proc.pid] if self.proc else []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """User + system CPU time so far of every process of the system and their live
        children (a JVM's threads are its process's), read from /proc."""
        total = 0.0
        for pid in self.server_pids():
            try:
                proc = psutil.Process(pid)
                procs = [proc, *proc.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for each in procs:
                try:
                    times = each.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                total += times.user + times.system
        return total

    def conn(self) -> dict[str, str]:
        """How the load generators reach the system (workloads.Conn)."""
        return {"url": self.url}


def _run_install(script: str) -> tuple[str, float]:
    t0 = time.monotonic()
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "bench" / script)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-8:])
        raise StartError(f"install ({script}) failed: {tail}")
    return res.stdout.strip().splitlines()[-1], time.monotonic() - t0


class PulsarStandalone(System):
    """org.apache.pulsar.PulsarStandaloneStarter from the jars install_pulsar.sh assembled;
    embedded bookie and RocksDB metadata, functions worker and stream storage off."""

    name = "Apache Pulsar"
    key = "pulsar"
    heap = "2g"
    direct = "2g"

    extra_conf: dict[str, str] = {}
    """More broker.conf keys (e.g. the client suites turn on batch-index acknowledgements)."""

    def install(self) -> None:
        lib, self.install_seconds = _run_install("install_pulsar.sh")
        self.lib = Path(lib)
        jar = next(self.lib.glob("pulsar-broker-[0-9]*.jar"), None)
        if jar is None:
            raise StartError(f"no pulsar-broker jar in {self.lib}")
        self.version = jar.stem.removeprefix("pulsar-broker-")
        java = shutil.which("java")
        if java is None:
            raise StartError("java not found (Java 17 is needed)")
        self.java = java

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        port, http, bk = free_port(), free_port(), free_port()
        self.http_port = http
        conf = self.data_dir / "standalone.conf"
        conf.write_text(
            (PEERS / "standalone.conf").read_text()
            + f"\n# picked by the harness\nbrokerServicePort={port}\nwebServicePort={http}\n"
            + "".join(f"{k}={v}\n" for k, v in self.extra_conf.items())
        )
        self.url = f"pulsar://127.0.0.1:{port}"
        argv = [
            self.java,
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            f"-XX:MaxDirectMemorySize={self.direct}",
            # the GC settings of Pulsar's conf/pulsar_env.sh, thread counts sized for 2 cores
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=10",
            "-XX:+ParallelRefProcEnabled",
            "-XX:+DisableExplicitGC",
            "-XX:+UnlockExperimentalVMOptions",
            "-XX:G1NewSizePercent=50",
            f"-XX:ParallelGCThreads={os.cpu_count() or 2}",
            f"-XX:ConcGCThreads={max(1, (os.cpu_count() or 2) // 2)}",
            # what bin/pulsar passes on Java 17
            "--add-opens=java.base/java.io=ALL-UNNAMED",
            "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
            "--add-opens=java.base/sun.net=ALL-UNNAMED",
            "--add-opens=java.management/sun.management=ALL-UNNAMED",
            "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
            "--add-opens=java.base/jdk.internal.platform=ALL-UNNAMED",
            "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
            "-Dio.netty.tryReflectionSetAccessible=true",
            "-Dpulsar.allocator.exit_on_oom=true",
            "-Dio.netty.recycler.maxCapacityPerThread=4096",
            f"-Dlog4j.configurationFile={PEERS / 'log4j2.xml'}",
            f"-Djava.io.tmpdir={self.data_dir}",
            "-cp",
            f"{self.lib}/*",
            "org.apache.pulsar.PulsarStandaloneStarter",
            "--config",
            str(conf),
            "--no-functions-worker",
            "--no-stream-storage",
            "--wipe-data",
            "--metadata-dir",
            str(self.data_dir / "metadata"),
            "--bookkeeper-dir",
            str(self.data_dir / "bookkeeper"),
            "--bookkeeper-port",
            str(bk),
            "--advertised-address",
            "127.0.0.1",
        ]
        return argv, {}, self.data_dir

    def ready(self) -> bool:
        return _http_ok(f"http://127.0.0.1:{self.http_port}/admin/v2/brokers/health")


class PulsarLite(System):
    """The pulsar-lite broker binary from the PyPI wheel (its own venv)."""

    name = "pulsar-lite"
    key = "pulsar-lite"
    startup_timeout = 30.0

    def install(self) -> None:
        binary, self.install_seconds = _run_install("install_pulsar_lite.sh")
        self.binary = Path(binary)
        py = ROOT / ".cache" / "pulsar-lite-venv" / "bin" / "python"
        res = subprocess.run(
            [str(py), "-c", "import importlib.metadata as m; print(m.version('pulsar-lite'))"],
            capture_output=True,
            text=True,
            check=False,
        )
        self.version = res.stdout.strip() or "?"

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        self.port = free_port()
        metrics = free_port()
        conf = self.data_dir / "pulsar-lite.toml"
        # Loopback only; the metrics endpoint (0.0.0.0:8080 by default) too.
        conf.write_text(
            f'addr = "127.0.0.1:{self.port}"\n'
            f'db_path = "{self.data_dir / "db"}"\n'
            'log_level = "warn"\n'
            "default_partitions = 0\n"
            "[metrics]\n"
            "enabled = true\n"
            f'addr = "127.0.0.1:{metrics}"\n'
        )
        self.url = f"pulsar://127.0.0.1:{self.port}"
        return [str(self.binary), "--config", str(conf)], {"RUST_LOG": "warn"}, self.data_dir

    def ready(self) -> bool:
        return _tcp_ok(self.port)


class MagnetarStandalone(System):
    """``magnetar standalone`` from the project's venv."""

    name = "Magnetar"
    key = "magnetar"
    startup_timeout = 60.0

    def install(self) -> None:
        exe = VENV_BIN / "magnetar"
        if not exe.exists():
            raise StartError(f"{exe} not found (run `make setup`)")
        self.exe = exe
        res = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=False)
        # "0.1.0, 15 hot-path modules compiled (mypyc)" or "0.1.0, pure Python (...)"
        text = (res.stdout.strip() or res.stderr.strip()).removeprefix("magnetar ") or "?"
        number, _, code = text.partition(", ")
        head = git_head()
        self.version = number + (f" ({head})" if head else "") + (f", {code}" if code else "")

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        port, self.http_port = free_port(), free_port()
        self.url = f"pulsar://127.0.0.1:{port}"
        argv = [
            str(self.exe),
            "standalone",
            "--data-dir",
            str(self.data_dir / "data"),
            "--port",
            str(port),
            "--http-port",
            str(self.http_port),
            "--advertised-address",
            "127.0.0.1",
            "--bind-address",
            "127.0.0.1",
        ]
        return argv, {"MAGNETAR_LOG_LEVEL": "WARNING"}, self.data_dir

    def ready(self) -> bool:
        return _http_ok(f"http://127.0.0.1:{self.http_port}/admin/v2/brokers/health")


class MagnetarDedup(MagnetarStandalone):
    """Magnetar with message deduplication on for every topic: beside ``magnetar``, the
    figures show what deduplication costs (issue 15: at most 10%)."""

    name = "Magnetar (dedup on)"
    key = "magnetar-dedup"

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        argv, env, cwd = super().argv()
        return [*argv, "--deduplication-enabled", "true"], env, cwd


BENCH_ROLE = "bench"
"""The secured systems' load generators authenticate as this role: not a super-user, granted
produce and consume on public/default, so every PRODUCER and SUBSCRIBE is authorized."""


class MagnetarCluster(MagnetarStandalone):
    """Magnetar as a cluster on this machine: etcd, three bookies and two brokers, each its
    own process, ledgers written E3/Wq2/Aq2 (every entry on two bookies). The load
    generators connect to the first broker; lookups send each topic to its owner, which
    may be either broker (the same processes as a three-bookie, two-broker PulsarCluster,
    without Kubernetes). Beside the standalone it shows what the cluster form costs and buys."""

    name = "Magnetar cluster (3 bookies, 2 brokers, E3/Wq2/Aq2)"
    key = "magnetar-cluster"
    bookies = 3
    brokers = 2
    ensemble = (3, 2, 2)

    def start(self) -> str:
        sys.path.insert(0, str(ROOT))
        from tests.support.bookies import BookieProc
        from tests.support.etcd import EtcdServer
        from tests.support.standalone import BrokerProc

        data = self.workdir / f"{self.key}-data"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        self.data_dir = data
        t0 = time.monotonic()
        self.parts: list[Any] = []
        try:
            etcd = EtcdServer(data / "etcd")
            self.parts.append(etcd.start())
            for _ in range(self.bookies):
                self.parts.append(BookieProc(etcd.url, data).start())
            brokers = [
                BrokerProc(etcd.url, data, ensemble=self.ensemble) for _ in range(self.brokers)
            ]
            for broker in brokers:
                self.parts.append(broker.start())
        except Exception as err:
            self.stop()
            raise StartError(f"cluster did not start: {err}") from err
        self.startup_seconds = time.monotonic() - t0
        self.url = brokers[0].service_url
        self.proc = brokers[0].proc.popen
        self.brokers_up = brokers
        return self.url

    def alive(self) -> bool:
        return all(part.alive() for part in getattr(self, "parts", []))

    def server_pids(self) -> list[int]:
        return [p for p in (part.pid for part in getattr(self, "parts", [])) if p is not None]

    def stop(self) -> None:
        for part in reversed(getattr(self, "parts", [])):
            try:
                part.stop()
            except Exception as err:  # stop the rest regardless
                print(f"stopping {part}: {err!r}", file=sys.stderr)
        self.parts = []
        self.proc = None
        data = getattr(self, "data_dir", None)
        if data is not None:
            shutil.rmtree(data, ignore_errors=True)


class Secured:
    """TLS and token authentication with authorization, configured alike for both systems:
    the keys of the security suites' set-up (tests/support/secured.py: a CA made for the run,
    a server certificate for ``localhost``, TLS, token and basic providers, a secret key from
    ``magnetar tokens``), the plaintext ports kept for the readiness probe only. The load
    generators connect to ``pulsar+ssl://localhost`` (hostname verified) with a token of
    :data:`BENCH_ROLE`."""

    def _secured_conf(self, workdir: Path) -> dict[str, str]:
        sys.path.insert(0, str(ROOT))
        from tests.support.secured import SecuredBase

        setup = SecuredBase()
        setup.base = workdir / "security"
        setup.refresh_check_s = 60.0
        setup.extra_conf = {}
        conf = setup._prepare()
        self.setup = setup
        self.url = setup.tls_service_url
        return conf

    def conn(self) -> dict[str, str]:
        return {
            "url": self.setup.tls_service_url,
            "tls_trust_certs": str(self.setup.ca.ca_file),
            "token": self.setup.token(BENCH_ROLE),
        }

    def grant(self) -> None:
        status, body = self.setup.https(
            "POST",
            f"/admin/v2/namespaces/public/default/permissions/{BENCH_ROLE}",
            token=self.setup.super_token,
            body=b'["produce", "consume"]',
        )
        if status // 100 != 2:
            raise StartError(f"granting {BENCH_ROLE} produce,consume: HTTP {status} {body[:200]!r}")

    def secured_ready(self) -> bool:
        if not self.setup.secured_ready():
            return False
        self.grant()
        return True


class PulsarSecured(Secured, PulsarStandalone):
    """Apache Pulsar standalone, TLS + token + authorization (:class:`Secured`)."""

    name = "Apache Pulsar (TLS + token)"
    key = "pulsar-secured"

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        argv, env, cwd = super().argv()
        conf = self._secured_conf(self.data_dir)
        conf_path = self.data_dir / "standalone.conf"
        # the security keys last (the ports the base picked are replaced: the last word wins)
        conf_path.write_text(
            conf_path.read_text()
            + "".join(f"{k}={v}\n" for k, v in conf.items() if k != "bindAddress")
        )
        argv[argv.index("--advertised-address") + 1] = "localhost"
        return argv, env, cwd

    def ready(self) -> bool:
        return self.secured_ready()


class MagnetarSecured(Secured, MagnetarStandalone):
    """``magnetar standalone``, TLS + token + authorization (:class:`Secured`)."""

    name = "Magnetar (TLS + token)"
    key = "magnetar-secured"

    def argv(self) -> tuple[list[str], dict[str, str], Path]:
        conf = self._secured_conf(self.data_dir)
        conf_path = self.data_dir / "standalone.conf"
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        argv = [
            str(self.exe), "standalone", "--config", str(conf_path),
            "--data-dir", str(self.data_dir / "data"),
        ]  # fmt: skip
        return argv, {"MAGNETAR_LOG_LEVEL": "WARNING"}, self.data_dir

    def ready(self) -> bool:
        return self.secured_ready()


ALL: dict[str, type[System]] = {
    "pulsar": PulsarStandalone,
    "pulsar-lite": PulsarLite,
    "magnetar": MagnetarStandalone,
    "magnetar-dedup": MagnetarDedup,
    "magnetar-cluster": MagnetarCluster,
    "pulsar-secured": PulsarSecured,
    "magnetar-secured": MagnetarSecured,
}
