"""A standalone secured like the official Python client's own test set-up: TLS on the binary
and HTTP ports (hostname verification on), TLS-certificate, token and basic providers,
authorization on, ``anonymous`` allowed on public/default, ``token-principal`` (and the
TLS and basic principals) granted on private/auth -- built here with a CA made by the test
(:mod:`tests.support.pki`), a secret key made by ``magnetar tokens`` and an htpasswd file.

The tenants, namespaces and grants are made with ``magnetar admin`` over HTTPS and a
client.conf holding a super-user token, as the client's set-up script does with
pulsar-admin.

Two targets share everything but the process: :class:`Secured` (``magnetar standalone``)
and :class:`SecuredPulsar` (Apache Pulsar standalone from the jars
``scripts/bench/install_pulsar.sh`` assembles, configured with the same keys), so the security
suites can check Magnetar's answers against Pulsar's (``MAGNETAR_SECURITY_AGAINST=pulsar``).
"""

from __future__ import annotations

import importlib.util
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar
from passlib.hash import apr_md5_crypt, des_crypt

from magnetar.security import keys, tokens
from tests.support.pki import CertificateAuthority, Pair
from tests.support.procs import LOOPBACK, Proc, TlsAddresses, free_ports, port_open
from tests.support.standalone import BrokerHttpProc

PROVIDERS = ",".join(
    f"org.apache.pulsar.broker.authentication.AuthenticationProvider{kind}"
    for kind in ("Tls", "Token", "Basic")
)
SUPER_USERS = ("localhost", "superUser", "admin")
ROOT = Path(__file__).resolve().parents[2]
BASIC_USERS = {"admin": "admin-secret", "basic-user": "basic-secret"}


def magnetar(*argv: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    """Run ``magnetar ARGV`` (this interpreter's package); its stdout (with ``check=False``,
    its stdout and stderr: a refusal is read from there)."""
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    if check and out.returncode != 0:
        raise AssertionError(f"magnetar {' '.join(argv)} -> {out.returncode}: {out.stderr}")
    return out.stdout if check else out.stdout + out.stderr


class SecuredBase(TlsAddresses):
    """What both secured targets share: the CA and certificates, keys and tokens, the
    htpasswd file, the configuration keys, client.conf, and the clients."""

    name = "?"
    base: Path
    refresh_check_s: float
    extra_conf: dict[str, str]
    port: int
    http_port: int
    tls_port: int
    https_port: int

    def _prepare(self) -> dict[str, str]:
        """Files and keys; the configuration (key -> value) both targets take."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.port, self.http_port, self.tls_port, self.https_port = free_ports(4)
        self.ca = CertificateAuthority(self.base / "pki")
        self.broker_cert: Pair = self.ca.issue("localhost", server=True, file_stem="broker")
        self.secret_key = self.base / "secret.key"
        magnetar("tokens", "create-secret-key", "--output", str(self.secret_key))
        htpasswd = self.base / ".htpasswd"
        htpasswd.write_text(
            f"admin:{apr_md5_crypt.hash(BASIC_USERS['admin'])}\n"
            f"basic-user:{des_crypt.hash(BASIC_USERS['basic-user'])}\n"
        )
        conf = {
            "brokerServicePort": str(self.port),
            "webServicePort": str(self.http_port),
            "brokerServicePortTls": str(self.tls_port),
            "webServicePortTls": str(self.https_port),
            "advertisedAddress": "localhost",
            "bindAddress": LOOPBACK,
            "tlsEnabled": "true",
            "tlsCertificateFilePath": str(self.broker_cert.cert),
            "tlsKeyFilePath": str(self.broker_cert.key),
            "tlsTrustCertsFilePath": str(self.ca.ca_file),
            "tlsAllowInsecureConnection": "false",
            "tlsCertRefreshCheckDurationSec": "1",
            "anonymousUserRole": "anonymous",
            "authenticationEnabled": "true",
            "authenticationProviders": PROVIDERS,
            "authenticationRefreshCheckSeconds": str(int(self.refresh_check_s)),
            "authorizationEnabled": "true",
            "tokenSecretKey": f"file://{self.secret_key}",
            "basicAuthConf": f"file://{htpasswd}",
            "superUserRoles": ",".join(SUPER_USERS),
        }
        self.super_token = self.token("superUser")
        # the broker's own calls to itself or other brokers, as a super-user
        conf["brokerClientAuthenticationPlugin"] = (
            "org.apache.pulsar.client.impl.auth.AuthenticationToken"
        )
        conf["brokerClientAuthenticationParameters"] = f"token:{self.super_token}"
        conf.update(self.extra_conf)
        self.client_conf = self.base / "client.conf"
        self.client_conf.write_text(
            f"webServiceUrl={self.https_url}\n"
            f"brokerServiceUrl={self.tls_service_url}\n"
            "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
            f"authParams=token:{self.super_token}\n"
            f"tlsTrustCertsFilePath={self.ca.ca_file}\n"
            "tlsEnableHostnameVerification=true\n"
        )
        return conf

    # --- addresses and credentials ------------------------------------------------------------

    def token(self, role: str, **options: Any) -> str:
        key = keys.read(f"file://{self.secret_key}", what="secret key")
        return tokens.create(subject=role, key=key, **options)

    def ssl_context(self, client_cert: Pair | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca.ca_file))
        if client_cert is not None:
            ctx.load_cert_chain(str(client_cert.cert), str(client_cert.key))
        return ctx

    def https(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        client_cert: Pair | None = None,
    ) -> tuple[int, bytes]:
        """(status, body) of a request to the HTTPS port (errors are answers too)."""
        request = urllib.request.Request(self.https_url + path, data=body, method=method)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(
                request, timeout=10, context=self.ssl_context(client_cert)
            ) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def secured_ready(self) -> bool:
        if not port_open(self.tls_port):
            return False
        try:
            status, _ = self.https("GET", "/admin/v2/brokers/health", token=self.super_token)
        except (OSError, urllib.error.URLError):
            return False
        return status == 200

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=10) as r:
            return str(r.read().decode())

    def client(self, **options: Any) -> pulsar.Client:
        """An official client over TLS (hostname verified) with ``options``."""
        return pulsar.Client(
            self.tls_service_url,
            **{
                "tls_trust_certs_file_path": str(self.ca.ca_file),
                "tls_validate_hostname": True,
                "operation_timeout_seconds": 10,
                **options,
            },
        )

    def admin(self, *argv: str, check: bool = True) -> str:
        """``magnetar admin --client-conf <super-user client.conf> ARGV``."""
        return magnetar("admin", "--client-conf", str(self.client_conf), *argv, check=check)

    def set_up_like_the_client_tests(self) -> None:
        """What the official client's set-up script does with pulsar-admin."""
        self.admin("tenants", "update", "public", "-r", "anonymous", "-c", "standalone")
        self.admin(
            "namespaces", "grant-permission", "public/default",
            "--actions", "produce,consume", "--role", "anonymous",
        )  # fmt: skip
        self.admin("tenants", "create", "private", "-r", "", "-c", "standalone")
        self.admin("namespaces", "create", "private/auth")
        for role in ("token-principal", "tls-principal", "basic-user"):
            self.admin(
                "namespaces", "grant-permission", "private/auth",
                "--actions", "produce,consume", "--role", role,
            )  # fmt: skip


@dataclass
class Secured(SecuredBase, BrokerHttpProc):
    """``magnetar standalone`` secured as the module docstring says, on free ports."""

    base: Path
    refresh_check_s: float = 1.0
    extra_conf: dict[str, str] = field(default_factory=dict)
    name = "magnetar"

    def __post_init__(self) -> None:
        conf = self._prepare()
        self.conf_file = self.base / "standalone.conf"
        self.conf_file.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        argv = [
            sys.executable, "-m", "magnetar.cli", "standalone",
            "--config", str(self.conf_file),
            "--data-dir", str(self.base / "data"),
        ]  # fmt: skip
        self.proc = Proc(argv, log_path=self.base / "standalone.log", ready=self.ready)

    def ready(self) -> bool:
        return self.secured_ready()


def _peer_systems() -> Any:
    spec = importlib.util.spec_from_file_location("peer_systems", ROOT / "bench/peers/systems.py")
    assert spec is not None and spec.loader is not None
    systems = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(systems)
    return systems


class SecuredPulsar(SecuredBase):
    """Apache Pulsar standalone with the same keys (its own TLS/auth implementation), for
    checking Magnetar's answers against Pulsar's."""

    name = "pulsar"

    def __init__(
        self,
        base: Path,
        *,
        refresh_check_s: float = 1.0,
        extra_conf: dict[str, str] | None = None,
    ) -> None:
        self.base = base
        self.refresh_check_s = refresh_check_s
        # as the client's conf
        self.extra_conf = {"topicLevelPoliciesEnabled": "false", **(extra_conf or {})}
        conf = self._prepare()
        systems = _peer_systems()
        outer = self

        class _Pulsar(systems.PulsarStandalone):  # type: ignore[misc, name-defined]
            def argv(self) -> tuple[list[str], dict[str, str], Path]:
                argv, env, cwd = super().argv()
                # the ports the base picked are replaced by ours (the conf's last word wins)
                conf_path = self.data_dir / "standalone.conf"
                conf_path.write_text(
                    conf_path.read_text()
                    + "".join(f"{k}={v}\n" for k, v in conf.items() if k not in ("bindAddress",))
                )
                i = argv.index("--advertised-address")
                argv[i + 1] = "localhost"
                return argv, env, cwd

            def ready(self) -> bool:
                return outer.secured_ready()

        self.system = _Pulsar(base)

    def start(self) -> SecuredPulsar:
        self.system.install()
        self.system.start()
        return self

    def stop(self) -> None:
        self.system.stop()

    def log(self) -> str:
        return str(self.system.log_path.read_text(errors="replace"))
