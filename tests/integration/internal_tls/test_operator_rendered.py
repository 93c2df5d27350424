"""What the operator renders for a PulsarCluster with ``spec.tls`` and ``spec.auth`` starts
the real processes and secures them: etcd with the builder's TLS flags, a bookie and a
broker with the rendered bookkeeper.conf / broker.conf and etcd settings files, each with
certificates from the operator's CA (``magnetar_operator.pki``) and tokens from its
signing key (``magnetar_operator.tokens``), and the proxy with the rendered proxy.conf --
only the mount paths, ports and addresses differ from a pod's. The official client then
produces and consumes over TLS with the operator's token; the admin API refuses a caller
without one; through the proxy (hostname verified against its certificate), a role is
refused until the namespace grants it, then produces and consumes: the brokers authorize
the client the proxy forwards, not the proxy's super-user role. The rendered autorecovery
Deployment's arguments, with the certificate the operator issues it, re-replicate a killed
TLS bookie's ledger.

Why here and not only on the local cluster: a key, flag or certificate property the
processes refuse shows up in seconds, without images or Kubernetes.
"""

from __future__ import annotations

import datetime as dt
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.common import grpctls, tlsfiles
from magnetar.ledger.client import LedgerClient
from magnetar.metadata import open_store
from magnetar_operator import pki, tokens
from magnetar_operator.builders import (
    autorecovery,
    bookie,
    broker,
    common,
    etcd,
    proxy,
    security,
)
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec
from tests.support.autorecovery import kill_one_and_read_back
from tests.support.etcd import ETCD_BINARY, etcd_available
from tests.support.procs import LOOPBACK, Proc, free_port, free_ports

pytestmark = [
    pytest.mark.etcd,
    pytest.mark.skipif(not etcd_available(), reason="etcd is not installed"),
]

OWNER = Owner("sec", "ns", "0b1c2d3e-0000-0000-0000-000000000001")
SPEC = ClusterSpec.parse(
    {"tls": {"enabled": True}, "auth": {"enabled": True}, "proxy": {"enabled": True}}
)
MAGNETAR = str(Path(sys.executable).with_name("magnetar"))


def _mount(directory: Path, ca: pki.KeyPair, names: list[str]) -> Path:
    """A component's TLS Secret as Kubernetes mounts it: tls.crt, tls.key, ca.crt, 0440."""
    directory.mkdir()
    leaf = pki.issue(
        ca, common_name=directory.name, names=names, now=dt.datetime.now(dt.UTC),
        lifetime=dt.timedelta(hours=1),
    )  # fmt: skip
    for name, data in (("tls.crt", leaf.cert), ("tls.key", leaf.key), ("ca.crt", ca.cert)):
        (directory / name).write_bytes(data)
        (directory / name).chmod(0o440)
    return directory


def _rendered(data: dict[str, str], replace: dict[str, str], **override: str) -> str:
    """The rendered properties with the pod's paths replaced by the test's, then
    ``override`` (ports, directories, addresses: what differs from a pod)."""
    out = {}
    for key, value in data.items():
        for pod_path, here in replace.items():
            value = value.replace(pod_path, here)
        out[key] = value
    out.update(override)
    return common.render_properties(out)


def _https_status(
    url: str, ca: Path, token: str | None = None, *, client: Path | None = None
) -> int:
    """The status of a GET; ``client``: a mounted TLS Secret whose pair to present."""
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(client / "tls.crt", client / "tls.key")
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


class Secured:
    """etcd, a bookie, a broker and a proxy configured by the operator's builders."""

    def __init__(self, base: Path) -> None:
        self.ca = pki.create_ca("sec CA", now=dt.datetime.now(dt.UTC))
        local = ["localhost", LOOPBACK]
        components = ("etcd", "bookie", "broker", "proxy")
        tls = {c: _mount(base / c, self.ca, local) for c in components}
        self.ca_file = tls["broker"] / "ca.crt"
        key = tokens.signing_key(tokens.generate_secret_key())
        auth = base / "auth"
        auth.mkdir()
        assert isinstance(key.signing, bytes)
        (auth / "secret.key").write_bytes(key.signing)
        (auth / security.BROKER_TOKEN).write_text(tokens.mint(key, security.BROKER_ROLE))
        (auth / security.PROXY_TOKEN).write_text(tokens.mint(key, security.PROXY_ROLE))
        self.token = tokens.mint(key, security.OPERATOR_ROLE)
        self.app_token = tokens.mint(key, "app")
        self.procs: list[Proc] = []

        client_port, peer_port = free_ports(2)
        flags = [f.replace(etcd.TLS_DIR, str(tls["etcd"])) for f in etcd.tls_flags()]
        client, peer = f"https://{LOOPBACK}:{client_port}", f"https://{LOOPBACK}:{peer_port}"
        self._start(
            [ETCD_BINARY, "--name=sec-etcd-0", f"--data-dir={base / 'etcd-data'}",
             f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
             f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
             f"--initial-cluster=sec-etcd-0={peer}", *flags],
            base / "etcd.log",
            ready=lambda: _https_status(f"{client}/health", self.ca_file, client=tls["broker"])
            == 200,
        )  # fmt: skip
        metadata = f"etcd:https://{LOOPBACK}:{client_port}"

        bk_conf = base / "bookkeeper.conf"
        (base / "bk-etcd.yaml").write_text(security.etcd_client_settings(str(tls["bookie"])))
        bk_conf.write_text(
            _rendered(
                bookie.config_data(OWNER, SPEC),
                {bookie.TLS_DIR: str(tls["bookie"])},
                metadataServiceUri=f"metadata-store:{metadata}",
                metadataStoreConfigPath=str(base / "bk-etcd.yaml"),
                bookiePort=str(free_port()),
                httpServerPort=str(free_port()),
                journalDirectories=str(base / "journal"),
                ledgerDirectories=str(base / "ledgers"),
            )
        )
        self._start(
            [MAGNETAR, "bookie", f"--config={bk_conf}", "--advertised-address=localhost"],
            base / "bookie.log",
            ready=lambda: "ready" in (base / "bookie.log").read_text(errors="replace"),
        )

        self.tls_port, self.https_port = free_ports(2)
        br_conf = base / "broker.conf"
        (base / "br-etcd.yaml").write_text(security.etcd_client_settings(str(tls["broker"])))
        br_conf.write_text(
            _rendered(
                broker.config_data(OWNER, SPEC),
                {broker.TLS_DIR: str(tls["broker"]), broker.AUTH_DIR: str(auth)},
                metadataStoreUrl=metadata,
                metadataStoreConfigPath=str(base / "br-etcd.yaml"),
                bindAddress=LOOPBACK,
                brokerServicePortTls=str(self.tls_port),
                webServicePortTls=str(self.https_port),
                managedLedgerDefaultEnsembleSize="1",
                managedLedgerDefaultWriteQuorum="1",
                managedLedgerDefaultAckQuorum="1",
                # functions run as Function resources only in a pod (docs/functions.md)
                magnetarFunctionsRuntime="none",
            )
        )
        self.admin_url = f"https://localhost:{self.https_port}"
        self._start(
            [MAGNETAR, "broker", f"--config={br_conf}", "--advertised-address=localhost"],
            base / "broker.log",
            ready=lambda: _https_status(f"{self.admin_url}/status.html", self.ca_file) == 200,
        )

        self.proxy_tls_port, self.proxy_https_port = free_ports(2)
        px_conf = base / "proxy.conf"
        (base / "px-etcd.yaml").write_text(security.etcd_client_settings(str(tls["proxy"])))
        px_conf.write_text(
            _rendered(
                proxy.config_data(OWNER, SPEC),
                {proxy.TLS_DIR: str(tls["proxy"]), proxy.AUTH_DIR: str(auth)},
                metadataStoreUrl=metadata,
                metadataStoreConfigPath=str(base / "px-etcd.yaml"),
                bindAddress=LOOPBACK,
                servicePortTls=str(self.proxy_tls_port),
                webServicePortTls=str(self.proxy_https_port),
            )
        )
        self.proxy_admin_url = f"https://{LOOPBACK}:{self.proxy_https_port}"
        self._start(
            [MAGNETAR, *(a.replace(f"{proxy.CONFIG_DIR}/{proxy.CONFIG_FILE}", str(px_conf))
                         for a in proxy.args(SPEC))],
            base / "proxy.log",
            ready=lambda: _https_status(f"{self.proxy_admin_url}/status.html", self.ca_file)
            == 200,
        )  # fmt: skip

    def _start(self, argv: list[str], log: Path, *, ready: Callable[[], bool]) -> None:
        proc = Proc(argv, log_path=log, ready=ready, ready_timeout=60)
        self.procs.append(proc)
        proc.start()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    s = Secured(tmp_path_factory.mktemp("operator-rendered"))
    try:
        yield s
    finally:
        s.stop()


def test_rendered_configuration_secures_every_process(secured: Secured) -> None:
    url = f"{secured.admin_url}/admin/v2/tenants"
    assert _https_status(url, secured.ca_file) == 401
    assert _https_status(url, secured.ca_file, token=secured.token) == 200
    client = pulsar.Client(
        f"pulsar+ssl://localhost:{secured.tls_port}",
        tls_trust_certs_file_path=str(secured.ca_file),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationToken(secured.token),
        operation_timeout_seconds=30,
    )
    try:
        topic = "persistent://public/default/rendered"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(f"m-{i}".encode())
        got = [consumer.receive(timeout_millis=10_000).data() for _ in range(20)]
        assert got == [f"m-{i}".encode() for i in range(20)]
    finally:
        client.close()
    # the broker reached the bookie over mutual TLS (it requires client certificates)
    assert "grpc+tls" in (secured.procs[1].log_path.read_text(errors="replace"))


def _produce_consume(url: str, ca: Path, token: str, topic: str) -> list[bytes]:
    client = pulsar.Client(
        url,
        tls_trust_certs_file_path=str(ca),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationToken(token),
        operation_timeout_seconds=30,
    )
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for i in range(20):
            producer.send(f"m-{i}".encode())
        return [consumer.receive(timeout_millis=10_000).data() for _ in range(20)]
    finally:
        client.close()


def test_through_the_rendered_proxy_the_brokers_authorize_the_client(secured: Secured) -> None:
    """The proxy's role is a super-user, yet a client it forwards gets only its own
    permissions: refused before the grant (lookup or producer), served after it."""
    url = f"pulsar+ssl://{LOOPBACK}:{secured.proxy_tls_port}"  # an IP address in its SANs
    admin = f"{secured.proxy_admin_url}/admin/v2"
    assert _https_status(f"{admin}/tenants", secured.ca_file) == 401
    assert _https_status(f"{admin}/tenants", secured.ca_file, token=secured.token) == 200
    topic = "persistent://public/default/through-proxy"
    with pytest.raises(pulsar.AuthorizationError):
        _produce_consume(url, secured.ca_file, secured.app_token, topic)
    grant = urllib.request.Request(
        f"{admin}/namespaces/public/default/permissions/app",
        data=b'["produce", "consume"]',
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {secured.token}"},
    )
    ctx = ssl.create_default_context(cafile=str(secured.ca_file))
    with urllib.request.urlopen(grant, timeout=10, context=ctx) as resp:
        assert resp.status == 204
    got = _produce_consume(url, secured.ca_file, secured.app_token, topic)
    assert got == [f"m-{i}".encode() for i in range(20)]
    # the proxy reached etcd (it found the broker there) and the broker over TLS
    assert _https_status(f"{secured.proxy_admin_url}/status.html", secured.ca_file) == 200


# --- the rendered autorecovery Deployment ------------------------------------------------
RECOVERY_SPEC = ClusterSpec.parse(
    {
        "tls": {"enabled": True},
        # what a user shortens through spec.autorecovery.extraArgs (the CRD's --flag=value form)
        "autorecovery": {
            "extraArgs": [
                "--lost-bookie-recovery-delay=3",
                "--audit-interval=1",
                "--open-ledger-grace=5",
                "--session-ttl=2",
            ]
        },
    }
)


def _rendered_autorecovery_argv(tls_dir: Path, metadata: str, http_port: int) -> list[str]:
    """The autorecovery container's arguments with the pod's mount, etcd address and port
    replaced by the test's (and bound to loopback)."""
    out = [MAGNETAR]
    for arg in autorecovery.args(OWNER, RECOVERY_SPEC):
        if arg.startswith("--metadata-url="):
            arg = f"--metadata-url={metadata}"
        elif arg.startswith("--http-port="):
            arg = f"--http-port={http_port}"
        out.append(arg.replace(autorecovery.TLS_DIR, str(tls_dir)))
    return [*out, f"--bind-address={LOOPBACK}"]


async def test_rendered_autorecovery_re_replicates_a_killed_tls_bookie(tmp_path: Path) -> None:
    """Three bookies with the rendered TLS bookkeeper.conf (no autorecovery in them) and the
    rendered ``magnetar autorecovery`` with the certificate the operator issues it (its
    subject's names: a client certificate only): a bookie of a ledger's ensemble SIGKILLed,
    its copies are restored on the third bookie, read back by content from both."""
    ca = pki.create_ca("sec CA", now=dt.datetime.now(dt.UTC))
    local = ["localhost", LOOPBACK]
    subject = next(
        s for s in security.subjects(OWNER, RECOVERY_SPEC) if s.component == "autorecovery"
    )
    tls = {c: _mount(tmp_path / c, ca, local) for c in ("etcd", "bookie", "client")}
    tls["autorecovery"] = _mount(tmp_path / "autorecovery", ca, list(subject.names))
    assert "autoRecoveryDaemonEnabled" not in bookie.config_data(OWNER, RECOVERY_SPEC)
    procs: list[Proc] = []

    def start(argv: list[str], log: Path, ready: Callable[[], bool]) -> Proc:
        proc = Proc(argv, log_path=log, ready=ready, ready_timeout=60)
        procs.append(proc)
        return proc.start()

    client_files = tlsfiles.TlsFiles(
        cert_file=tls["client"] / "tls.crt",
        key_file=tls["client"] / "tls.key",
        trust_file=tls["client"] / "ca.crt",
    )
    try:
        client_port, peer_port = free_ports(2)
        flags = [f.replace(etcd.TLS_DIR, str(tls["etcd"])) for f in etcd.tls_flags()]
        client, peer = f"https://{LOOPBACK}:{client_port}", f"https://{LOOPBACK}:{peer_port}"
        start(
            [ETCD_BINARY, "--name=sec-etcd-0", f"--data-dir={tmp_path / 'etcd-data'}",
             f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
             f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
             f"--initial-cluster=sec-etcd-0={peer}", *flags],
            tmp_path / "etcd.log",
            lambda: _https_status(f"{client}/health", tls["client"] / "ca.crt",
                                  client=tls["client"]) == 200,
        )  # fmt: skip
        metadata = f"etcd:https://{LOOPBACK}:{client_port}"
        (tmp_path / "bk-etcd.yaml").write_text(security.etcd_client_settings(str(tls["bookie"])))
        bookies: dict[str, Proc] = {}
        for i in range(3):
            port, log = free_port(), tmp_path / f"bookie-{i}.log"
            conf = tmp_path / f"bookkeeper-{i}.conf"
            conf.write_text(
                _rendered(
                    bookie.config_data(OWNER, RECOVERY_SPEC),
                    {bookie.TLS_DIR: str(tls["bookie"])},
                    metadataServiceUri=metadata,
                    metadataStoreConfigPath=str(tmp_path / "bk-etcd.yaml"),
                    bookiePort=str(port),
                    httpServerPort=str(free_port()),
                    journalDirectories=str(tmp_path / f"journal-{i}"),
                    ledgerDirectories=str(tmp_path / f"ledgers-{i}"),
                )
            )
            bookies[f"localhost:{port}"] = start(
                [MAGNETAR, "bookie", f"--config={conf}", "--advertised-address=localhost"],
                log,
                lambda log=log: "ready" in log.read_text(errors="replace"),
            )
        http_port = free_port()
        start(
            _rendered_autorecovery_argv(tls["autorecovery"], metadata, http_port),
            tmp_path / "autorecovery.log",
            lambda: _http_ok(f"http://{LOOPBACK}:{http_port}/health"),
        )

        config = grpctls.ClientTlsConfig(files=client_files)
        store = await open_store(f"etcd://{LOOPBACK}:{client_port}", tls=config)
        ledgers = LedgerClient(store, tls=config.open(), rpc_timeout=5.0)
        try:
            await kill_one_and_read_back(ledgers, store, bookies, prefix=b"rendered")
        finally:
            await ledgers.close()
            await store.close()
    finally:
        for proc in reversed(procs):
            proc.stop()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status) == 200
    except OSError:
        return False
