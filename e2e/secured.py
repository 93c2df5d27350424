"""A PulsarCluster with ``spec.tls`` and ``spec.auth`` on the local cluster (issue 21,
acceptance point 4), beside the PulsarCluster suite's cluster and reconciled by the same
operator (e2e/test_pulsarcluster.py calls :func:`check`):

* it turns Ready (CertificatesReady and AuthReady True: the operator's CA, each
  component's certificate, the generated signing key and its super-user tokens);
* the certificates are the ones the processes serve: the certificate etcd, the bookie, the
  broker and the proxy present in a TLS handshake from the host (each verified against the
  cluster's CA, etcd's and the bookie's with a client certificate, as they require one) is
  the one in their Secret -- so each process holds that Secret's key too; the proxy's
  carries its Service's cluster IP (added once the Service has one);
* a client on the host connects through the proxy's Service over TLS, the hostname
  verified (its cluster IP is in the proxy's certificate), with a token minted from the
  cluster's signing key (``magnetar tokens create``), and produces and consumes; the admin
  API, through the proxy too, refuses a caller without a token;
* a Tenant and a Topic applied with kubectl turn Ready through the operator's authenticated
  admin client, and ``magnetar admin`` with the token sees them;
* (full form) a renewal reaches the processes: the brokers' certificate replaced by one
  inside the renewal margin is issued again by the operator, and the broker serves the new
  one on 6651 and 8443 without restarting (kubelet updates the mounted files, the broker
  re-reads them every minute);
* deleting it all leaves no claim.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import yaml
from tests.support.wait import wait_until

from e2e.localcluster import ROOT, Cluster
from magnetar_operator import pki

NS = "magnetar-secured"
NAME = "sec"
EXAMPLE = ROOT / "crds/examples/pulsarcluster-secured.yaml"


def _secret(c: Cluster, name: str) -> dict[str, bytes]:
    data = json.loads(c.k("-n", NS, "get", "secret", name, "-o", "json"))["data"]
    return {k: base64.b64decode(v) for k, v in data.items()}


def _pod_ip(c: Cluster, component: str) -> str:
    selector = f"app.kubernetes.io/component={component},app.kubernetes.io/instance={NAME}"
    pods = json.loads(c.k("-n", NS, "get", "pods", "-l", selector, "-o", "json"))["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return str(pods[0]["status"]["podIP"])


def served_certificate(
    host: str, port: int, *, ca: Path, client: tuple[Path, Path] | None = None
) -> bytes:
    """The DER certificate a TLS server presents, verified against ``ca`` (not its name:
    pod addresses are not in the certificates), presenting ``client`` when given."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2", "http/1.1"])  # gRPC (the bookie) and etcd speak h2
    if client:
        ctx.load_cert_chain(str(client[0]), str(client[1]))
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


def _status(url: str, *, ca: Path, token: str | None = None) -> int:
    ctx = ssl.create_default_context(cafile=str(ca))
    req = urllib.request.Request(url)  # noqa: S310  (https URLs built here)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:  # noqa: S310
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _magnetar(*argv: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "magnetar.cli", *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, f"magnetar {' '.join(argv)}: {out.stderr}"
    return out.stdout


def check(c: Cluster, timings: dict[str, float], *, rotation: bool) -> None:
    """Apply the secured example in its own namespace, check it (``rotation``: a renewal
    too), delete it."""
    c.k("apply", "-f", "-", stdin=yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))  # fmt: skip
    try:
        _check(c, timings, rotation=rotation)
    finally:
        c.k("-n", NS, "delete", "topics,tenants", "--all", "--timeout=120s", timeout=150)
        c.k("-n", NS, "delete", "pulsarcluster", NAME, "--ignore-not-found", "--timeout=180s",
            timeout=200)  # fmt: skip
        wait_until(
            lambda: not c.k("-n", NS, "get", "pvc", "-o", "name").strip(),
            timeout=120,
            what="the secured cluster's claims deleted",
        )
        c.k("delete", "namespace", NS, "--timeout=120s", timeout=150)


def _check(c: Cluster, timings: dict[str, float], *, rotation: bool) -> None:
    t0 = time.monotonic()
    c.k("-n", NS, "apply", "-f", str(EXAMPLE))
    c.k("-n", NS, "wait", f"pulsarcluster/{NAME}", "--for=condition=Ready", "--timeout=600s",
        timeout=620)  # fmt: skip
    timings["secured_ready"] = time.monotonic() - t0
    print(f"secured PulsarCluster Ready {timings['secured_ready']:.1f}s after apply")
    status = json.loads(c.k("-n", NS, "get", "pulsarcluster", NAME, "-o", "json"))["status"]
    conds = {x["type"]: x["status"] for x in status["conditions"]}
    assert conds["CertificatesReady"] == conds["AuthReady"] == "True", conds
    # TLS bookies run no autorecovery: its own Deployment does (docs/kubernetes.md)
    assert conds["AutorecoveryReady"] == "True", conds

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        ca = d / "ca.crt"
        ca.write_bytes(_secret(c, f"{NAME}-ca")["ca.crt"])
        files: dict[str, tuple[Path, Path]] = {}
        for component in ("etcd", "bookie", "broker", "proxy"):
            data = _secret(c, f"{NAME}-{component}-tls")
            crt, key = d / f"{component}.crt", d / f"{component}.key"
            crt.write_bytes(data["tls.crt"])
            key.write_bytes(data["tls.key"])
            files[component] = (crt, key)

        # -- the processes serve the certificates of their Secrets
        t1 = time.monotonic()
        for component, port, client in (
            ("etcd", 2379, files["broker"]),  # etcd requires a client certificate
            ("bookie", 3181, files["broker"]),  # so does the bookie (mutual TLS)
            ("broker", 6651, None),
            ("broker", 8443, None),
        ):
            served = served_certificate(_pod_ip(c, component), port, ca=ca, client=client)
            assert served == _der(files[component][0].read_bytes()), f"{component}:{port}"
        svc = json.loads(c.k("-n", NS, "get", "svc", f"{NAME}-proxy", "-o", "json"))
        ip = svc["spec"]["clusterIP"]
        assert {p["port"] for p in svc["spec"]["ports"]} == {6651, 8443}, "TLS ports only"
        proxy_cert: bytes = wait_until(
            lambda: ip in pki.names_of(crt := _secret(c, f"{NAME}-proxy-tls")["tls.crt"]) and crt,
            timeout=60,
            what="the proxy Service's cluster IP in the proxy's certificate",
        )
        for port in (6651, 8443):  # re-read from the mounted files, no restart
            wait_until(
                lambda port=port: served_certificate(ip, port, ca=ca) == _der(proxy_cert),
                timeout=300,
                interval=5,
                what=f"the proxy serving the certificate with its cluster IP on {port}",
            )

        # -- a client on the host: TLS and a token minted from the cluster's signing key
        key_file = d / "secret.key"
        key_file.write_bytes(_secret(c, f"{NAME}-token-key")["secret.key"])
        token = _magnetar(
            "tokens", "create", "--secret-key", f"file://{key_file}", "--subject", "admin"
        ).strip()
        admin_url = f"https://{ip}:8443"
        assert _status(f"{admin_url}/admin/v2/tenants", ca=ca) == 401
        assert _status(f"{admin_url}/admin/v2/tenants", ca=ca, token=token) == 200
        client = pulsar.Client(
            f"pulsar+ssl://{ip}:6651",
            tls_trust_certs_file_path=str(ca),
            tls_validate_hostname=True,  # the proxy answers lookups with its own address
            authentication=pulsar.AuthenticationToken(token),
            operation_timeout_seconds=60,
        )
        try:
            topic = "persistent://public/default/secured"
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            sent = {f"m-{i}".encode() for i in range(100)}
            for payload in sorted(sent):
                producer.send(payload)
            got: set[bytes] = set()
            while got != sent:
                msg = consumer.receive(timeout_millis=30_000)
                got.add(msg.data())
                consumer.acknowledge(msg)
        finally:
            client.close()

        # -- Tenant and Topic through the operator's authenticated admin client
        ref = {"name": NAME}
        docs = [
            {"apiVersion": "magnetar.dev/v1alpha1", "kind": "Tenant",
             "metadata": {"name": "acme"},
             "spec": {"clusterRef": ref, "name": "acme", "namespaces": [{"name": "orders"}]}},
            {"apiVersion": "magnetar.dev/v1alpha1", "kind": "Topic",
             "metadata": {"name": "acme-orders-created"},
             "spec": {"clusterRef": ref, "tenant": "acme", "namespace": "orders",
                      "name": "created", "partitions": 2}},
        ]  # fmt: skip
        c.k("-n", NS, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        c.k("-n", NS, "wait", "tenant/acme", "topic/acme-orders-created",
            "--for=condition=Ready", "--timeout=120s", timeout=140)  # fmt: skip
        auth = ["--admin-url", admin_url, "--auth-plugin", "token", "--auth-params",
                f"token:{token}", "--tls-trust-cert-path", str(ca)]  # fmt: skip
        assert "acme" in _magnetar("admin", *auth, "tenants", "list")
        listed = _magnetar("admin", *auth, "topics", "list-partitioned-topics", "acme/orders")
        assert "persistent://acme/orders/created" in listed
        timings["secured_checks"] = time.monotonic() - t1
        if rotation:
            _renewal_reaches_the_broker(c, ca, timings)


def _renewal_reaches_the_broker(c: Cluster, ca: Path, timings: dict[str, float]) -> None:
    t0 = time.monotonic()
    name = f"{NAME}-broker-tls"
    before = _secret(c, name)
    authority = _secret(c, f"{NAME}-ca")
    near = pki.issue(
        pki.KeyPair(authority["ca.crt"], authority["ca.key"]),
        common_name=f"{NAME}-broker",
        names=sorted(pki.names_of(before["tls.crt"])),
        now=dt.datetime.now(dt.UTC),
        lifetime=dt.timedelta(hours=1),  # inside renewBefore (720h): the operator renews it
    )
    patch = {"data": {"tls.crt": base64.b64encode(near.cert).decode(),
                      "tls.key": base64.b64encode(near.key).decode()}}  # fmt: skip
    c.k("-n", NS, "patch", "secret", name, "--type=merge", "-p", json.dumps(patch))
    renewed: bytes = wait_until(
        lambda: (crt := _secret(c, name)["tls.crt"]) not in (before["tls.crt"], near.cert) and crt,
        timeout=60,
        what="the operator's renewal of the brokers' certificate",
    )
    assert pki.not_after(renewed) - dt.datetime.now(dt.UTC) > dt.timedelta(days=89)
    pod = json.loads(c.k("-n", NS, "get", "pods", "-l",
                         f"app.kubernetes.io/component=broker,app.kubernetes.io/instance={NAME}",
                         "-o", "json"))["items"][0]  # fmt: skip
    ip = str(pod["status"]["podIP"])
    for port in (6651, 8443):
        wait_until(
            lambda port=port: served_certificate(ip, port, ca=ca) == _der(renewed),
            timeout=300,
            interval=5,
            what=f"the broker serving the renewed certificate on {port}",
        )
    after = json.loads(c.k("-n", NS, "get", "pod", pod["metadata"]["name"], "-o", "json"))
    assert after["metadata"]["uid"] == pod["metadata"]["uid"], "the same pod: no restart"
    restarts = after["status"]["containerStatuses"][0]["restartCount"]
    assert restarts == pod["status"]["containerStatuses"][0]["restartCount"]
    timings["secured_renewal_served"] = time.monotonic() - t0
    print(f"renewed broker certificate served after {timings['secured_renewal_served']:.1f}s")
