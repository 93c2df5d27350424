"""``spec.tls`` and ``spec.auth`` on the real control plane, with the real operator.

* the operator's CA and each component's certificate in Secrets (chaining to the CA, for
  the Services' and pods' names), the token signing key it generates and the super-user
  tokens it mints, and the flags, keys and mounts that hand them to etcd, bookies and
  brokers; the cluster turns Ready;
* renewal: a certificate inside its renewal margin, one for names that changed (a bookie
  added) and a signing key replaced are issued again, without a pod restarting;
* Tenant and Topic resources reconciled through an admin API that needs TLS and a
  super-user token: a real ``magnetar standalone`` with its certificate from the cluster's
  CA and the cluster's signing key, which refuses a caller without the token.
"""

from __future__ import annotations

import base64
import datetime as dt
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from kubernetes import client
from kubernetes.client.rest import ApiException

from magnetar_operator import pki
from tests.k8s import helpers
from tests.k8s.helpers import CR, FakeKubelet, condition, eventually
from tests.support.procs import LOOPBACK, Proc, free_port

pytestmark = pytest.mark.k8s

SPEC: dict[str, Any] = {
    "metadata": {"etcd": {"replicas": 1}},
    "bookies": {"replicas": 2, "ensembleSize": 2, "writeQuorum": 2, "ackQuorum": 2},
    "brokers": {"replicas": 1},
    "tls": {"enabled": True, "duration": "48h", "renewBefore": "12h"},
    "auth": {"enabled": True, "superUserRoles": ["admin"]},
    "proxy": {"enabled": True, "certificateNames": ["pulsar.example.com"]},
    "persistence": {"reclaimPolicy": "Delete"},
}


def make_cluster(cr: CR, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return cr.create(
        "pulsarclusters",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "PulsarCluster",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def secret_data(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, bytes]:
    secret = core.read_namespaced_secret(name, namespace)
    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def put_secret(core: client.CoreV1Api, namespace: str, name: str, data: dict[str, bytes]) -> None:
    body = {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    core.patch_namespaced_secret(name, namespace, body)


def ready(cr: CR, plural: str, name: str) -> dict[str, Any]:
    obj = cr.get(plural, name)
    cond = condition(obj, "Ready")
    assert cond and cond["status"] == "True", obj.get("status")
    return obj


def serial(cert_pem: bytes) -> int:
    return int(x509.load_pem_x509_certificate(cert_pem).serial_number)


def test_certificates_tokens_and_what_the_components_are_given(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet
) -> None:
    cr = CR(api, namespace)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    pc = make_cluster(cr, "sec", SPEC)
    obj = eventually(lambda: ready(cr, "pulsarclusters", "sec"), timeout=90, what="Ready")
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conds["CertificatesReady"]["status"] == "True", conds["CertificatesReady"]
    assert conds["AuthReady"]["status"] == "True", conds["AuthReady"]
    assert obj["status"]["serviceUrl"] == f"pulsar+ssl://sec-broker.{namespace}.svc:6651"
    assert obj["status"]["adminUrl"] == f"https://sec-broker.{namespace}.svc:8443"
    assert obj["status"]["proxyUrl"] == f"pulsar+ssl://sec-proxy.{namespace}.svc:6651"
    assert obj["status"]["proxyAdminUrl"] == f"https://sec-proxy.{namespace}.svc:8443"

    # -- the CA and the certificates
    ca = secret_data(core, namespace, "sec-ca")
    assert set(ca) == {"ca.crt", "ca.key"}
    now = dt.datetime.now(dt.UTC)
    expected = {
        "sec-etcd-tls": f"sec-etcd-0.sec-etcd.{namespace}.svc",
        "sec-bookie-tls": f"sec-bookie-1.sec-bookie.{namespace}.svc",
        "sec-broker-tls": f"sec-broker.{namespace}.svc",
        "sec-autorecovery-tls": "sec-autorecovery",
        "sec-proxy-tls": f"sec-proxy.{namespace}.svc",
    }
    for name, must_name in expected.items():
        secret = core.read_namespaced_secret(name, namespace)
        assert secret.type == "kubernetes.io/tls"
        assert [r.uid for r in secret.metadata.owner_references] == [pc["metadata"]["uid"]]
        data = secret_data(core, namespace, name)
        assert data["ca.crt"] == ca["ca.crt"]
        assert pki.signed_by(data["tls.crt"], ca["ca.crt"]), name
        assert pki.key_matches(data["tls.crt"], data["tls.key"]), name
        assert must_name in pki.names_of(data["tls.crt"]), name
        lifetime = pki.not_after(data["tls.crt"]) - now
        assert dt.timedelta(hours=47) < lifetime <= dt.timedelta(hours=48), "spec.tls.duration"

    # -- the signing key and the tokens
    key = secret_data(core, namespace, "sec-token-key")["secret.key"]
    assert len(key) == 32
    minted = secret_data(core, namespace, "sec-tokens")
    for item, role in (
        ("operator.token", "magnetar-operator"),
        ("broker.token", "magnetar-broker"),
        ("proxy.token", "magnetar-proxy"),
    ):
        assert jwt.decode(minted[item].decode(), key, algorithms=["HS256"])["sub"] == role

    # -- the proxy's certificate: its Service's names, then its cluster IP once it has one
    cluster_ip = core.read_namespaced_service("sec-proxy", namespace).spec.cluster_ip

    def proxy_names() -> set[str] | None:
        names = pki.names_of(secret_data(core, namespace, "sec-proxy-tls")["tls.crt"])
        return names if cluster_ip in names else None

    names = eventually(proxy_names, timeout=30, what="the proxy's cluster IP in its certificate")
    assert {"pulsar.example.com", f"sec-proxy.{namespace}.svc.cluster.local"} <= names

    # -- what the components are given
    etcd = apps.read_namespaced_stateful_set("sec-etcd", namespace).spec.template.spec
    assert "--client-cert-auth" in etcd.containers[0].command
    assert etcd.volumes[0].secret.secret_name == "sec-etcd-tls"
    bookies = apps.read_namespaced_stateful_set("sec-bookie", namespace).spec.template.spec
    assert "sec-bookie-tls" in {v.secret.secret_name for v in bookies.volumes if v.secret}
    conf = core.read_namespaced_config_map("sec-bookie", namespace).data["bookkeeper.conf"]
    assert "tlsClientAuthentication=true" in conf
    brokers = apps.read_namespaced_deployment("sec-broker", namespace).spec.template.spec
    auth = next(v for v in brokers.volumes if v.name == "auth").projected.sources
    assert [(s.secret.name, [i.key for i in s.secret.items]) for s in auth] == [
        ("sec-token-key", ["secret.key"]),
        ("sec-tokens", ["broker.token"]),
    ]
    conf = core.read_namespaced_config_map("sec-broker", namespace).data["broker.conf"]
    assert "superUserRoles=magnetar-operator,magnetar-broker,magnetar-proxy,admin\n" in conf
    assert "proxyRoles=magnetar-proxy\n" in conf
    assert "brokerServicePortTls=6651\n" in conf and "brokerServicePort=\n" in conf
    proxies = apps.read_namespaced_deployment("sec-proxy", namespace).spec.template.spec
    auth = next(v for v in proxies.volumes if v.name == "auth").projected.sources
    assert [(s.secret.name, [i.key for i in s.secret.items]) for s in auth] == [
        ("sec-token-key", ["secret.key"]),
        ("sec-tokens", ["proxy.token"]),
    ]
    assert "sec-proxy-tls" in {v.secret.secret_name for v in proxies.volumes if v.secret}
    conf = core.read_namespaced_config_map("sec-proxy", namespace).data["proxy.conf"]
    assert "servicePortTls=6651\n" in conf and "servicePort=\n" in conf
    assert "tlsEnabledWithBroker=true\n" in conf
    assert "brokerClientAuthenticationParameters=file:///etc/magnetar/auth/proxy.token" in conf
    svc = core.read_namespaced_service("sec-proxy", namespace).spec
    assert {p.port for p in svc.ports} == {6651, 8443}

    # -- renewal: a broker certificate inside its margin (12h) is issued again
    ca_pair = pki.KeyPair(ca["ca.crt"], ca["ca.key"])
    broker = secret_data(core, namespace, "sec-broker-tls")
    near = pki.issue(
        ca_pair,
        common_name="sec-broker",
        names=sorted(pki.names_of(broker["tls.crt"])),
        now=now,
        lifetime=dt.timedelta(hours=6),
    )
    put_secret(core, namespace, "sec-broker-tls", {"tls.crt": near.cert, "tls.key": near.key})
    renewed = eventually(
        lambda: (
            (d := secret_data(core, namespace, "sec-broker-tls"))["tls.crt"]
            not in (near.cert, broker["tls.crt"])
            and d
        ),
        timeout=30,
        what="the certificate inside its renewal margin issued again",
    )
    assert pki.not_after(renewed["tls.crt"]) - now > dt.timedelta(hours=47)
    assert pki.key_matches(renewed["tls.crt"], renewed["tls.key"])

    # -- a bookie added: its name joins the bookies' certificate
    old_bookie = secret_data(core, namespace, "sec-bookie-tls")["tls.crt"]
    pods_before = {p.metadata.uid for p in core.list_namespaced_pod(namespace).items}
    cr.patch("pulsarclusters", "sec", {"spec": {"bookies": {"replicas": 3}}})
    added = f"sec-bookie-2.sec-bookie.{namespace}.svc"
    eventually(
        lambda: added in pki.names_of(secret_data(core, namespace, "sec-bookie-tls")["tls.crt"]),
        timeout=30,
        what="the new bookie's name in the certificate",
    )
    assert serial(secret_data(core, namespace, "sec-bookie-tls")["tls.crt"]) != serial(old_bookie)
    # renewals change files in place: no pod was replaced for them
    pods_after = {p.metadata.uid for p in core.list_namespaced_pod(namespace).items}
    assert pods_before <= pods_after, "no pod was replaced for a renewal"

    # -- the signing key replaced: the tokens are minted again with it, and the brokers
    # (which read their key at startup) get a new pod template
    def broker_template_hash() -> str:
        dep = apps.read_namespaced_deployment("sec-broker", namespace)
        return str(dep.spec.template.metadata.annotations["magnetar.dev/config-hash"])

    hash_before = broker_template_hash()
    new_key = b"k" * 32
    put_secret(core, namespace, "sec-token-key", {"secret.key": new_key})

    def minted_with_new_key() -> bool:
        token = secret_data(core, namespace, "sec-tokens")["operator.token"].decode()
        try:
            return jwt.decode(token, new_key, algorithms=["HS256"])["sub"] == "magnetar-operator"
        except jwt.InvalidSignatureError:
            return False

    eventually(minted_with_new_key, timeout=30, what="tokens minted with the new key")
    eventually(lambda: broker_template_hash() != hash_before, timeout=30, what="brokers roll")
    reasons = {e.reason for e in core.list_namespaced_event(namespace).items}
    assert {"CAIssued", "CertificateIssued", "SigningKeyCreated", "TokensIssued"} <= reasons


def test_autorecovery_deployment_with_tls(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet
) -> None:
    """With ``spec.tls`` the bookies run no autorecovery: the operator renders ``magnetar
    autorecovery`` as ``<cluster>-autorecovery`` with a client certificate of its own from
    the cluster's CA (what the bookies and etcd require), scales it from the spec, deletes it
    when TLS is turned off, and the garbage collector removes it with the cluster."""
    cr = CR(api, namespace)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    spec = {
        "metadata": {"etcd": {"replicas": 1}},
        "bookies": {"replicas": 2, "ensembleSize": 2, "writeQuorum": 2, "ackQuorum": 2},
        "brokers": {"replicas": 1},
        "tls": {"enabled": True},
        "autorecovery": {"resources": {"requests": {"cpu": "20m"}}},
    }
    pc = make_cluster(cr, "ar", spec)
    obj = eventually(lambda: ready(cr, "pulsarclusters", "ar"), timeout=90, what="Ready")
    cond = condition(obj, "AutorecoveryReady")
    assert cond is not None and cond["status"] == "True", obj["status"]
    assert obj["status"]["autorecovery"]["summary"] == "1/1"

    dep = apps.read_namespaced_deployment("ar-autorecovery", namespace)
    assert [r.uid for r in dep.metadata.owner_references] == [pc["metadata"]["uid"]]
    pod = dep.spec.template.spec
    assert pod.automount_service_account_token is False
    assert [(v.name, v.secret.secret_name) for v in pod.volumes] == [
        ("tls", "ar-autorecovery-tls")
    ], "its own certificate: not the bookies' server key"
    c = pod.containers[0]
    assert c.args[0] == "autorecovery"
    assert f"--metadata-url=etcd:https://ar-etcd-client.{namespace}.svc:2379" in c.args
    assert "--bookkeeper-tls-client-authentication=true" in c.args
    mounted = {m.name: m.mount_path for m in c.volume_mounts}
    for flag, item in (
        ("--bookkeeper-tls-certificate-file", "tls.crt"),
        ("--bookkeeper-tls-key-file", "tls.key"),
        ("--metadata-tls-trust-certs-file", "ca.crt"),
    ):
        assert f"{flag}={mounted['tls']}/{item}" in c.args
    assert c.resources.requests == {"cpu": "20m"}
    assert c.readiness_probe.http_get.path == "/health"
    # the Secret it mounts: a client certificate from the cluster's CA, with its key
    ca = secret_data(core, namespace, "ar-ca")["ca.crt"]
    cert = secret_data(core, namespace, "ar-autorecovery-tls")
    assert pki.signed_by(cert["tls.crt"], ca) and cert["ca.crt"] == ca
    assert pki.key_matches(cert["tls.crt"], cert["tls.key"])
    conf = core.read_namespaced_config_map("ar-bookie", namespace).data["bookkeeper.conf"]
    assert "autoRecoveryDaemonEnabled" not in conf, "a TLS bookie runs none in-process"
    svc = core.read_namespaced_service("ar-autorecovery", namespace).spec
    assert [(p.name, p.port) for p in svc.ports] == [("http", 8001)], "/metrics"
    assert svc.selector == dep.spec.selector.match_labels

    # -- spec.autorecovery.replicas
    cr.patch("pulsarclusters", "ar", {"spec": {"autorecovery": {"replicas": 2}}})
    eventually(
        lambda: apps.read_namespaced_deployment("ar-autorecovery", namespace).spec.replicas == 2,
        timeout=30,
        what="2 autorecovery replicas",
    )

    def deployment_gone() -> bool:
        """The Deployment and its Service both gone."""
        for read in (apps.read_namespaced_deployment, core.read_namespaced_service):
            try:
                read("ar-autorecovery", namespace)
            except ApiException as e:
                assert e.status == 404
            else:
                return False
        return True

    # -- TLS off: the bookies run it again, the Deployment goes
    cr.patch("pulsarclusters", "ar", {"spec": {"tls": {"enabled": False}}})
    eventually(deployment_gone, timeout=30, what="the autorecovery Deployment, Service deleted")
    conf = core.read_namespaced_config_map("ar-bookie", namespace).data["bookkeeper.conf"]
    assert "autoRecoveryDaemonEnabled=true" in conf
    eventually(
        lambda: (
            condition(o := cr.get("pulsarclusters", "ar"), "AutorecoveryReady") is None
            and "autorecovery" not in o["status"]
        ),
        timeout=30,
        what="no AutorecoveryReady condition nor autorecovery status without TLS",
    )

    # -- TLS on again, then the cluster deleted: the garbage collector removes it
    cr.patch("pulsarclusters", "ar", {"spec": {"tls": {"enabled": True}}})
    eventually(
        lambda: (
            apps.read_namespaced_deployment("ar-autorecovery", namespace)
            and core.read_namespaced_service("ar-autorecovery", namespace)
        ),
        timeout=30,
        what="the Deployment and its Service back",
    )
    cr.delete("pulsarclusters", "ar")
    eventually(deployment_gone, timeout=60, what="Deployment and Service garbage-collected")

    def secret_gone() -> bool:
        return "ar-autorecovery-tls" not in {
            s.metadata.name for s in core.list_namespaced_secret(namespace).items
        }

    eventually(secret_gone, timeout=60, what="its certificate Secret garbage-collected")


# --- Tenant / Topic through the authenticated admin API ------------------------------------
class SecuredStandalone:
    """``magnetar standalone`` with HTTPS only, its certificate from ``ca`` and token
    authentication with ``secret_key``: the admin API a secured cluster's brokers serve."""

    def __init__(self, workdir: Path, *, ca: pki.KeyPair, secret_key: bytes) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        leaf = pki.issue(
            ca,
            common_name="localhost",
            names=["localhost", LOOPBACK],
            now=dt.datetime.now(dt.UTC),
            lifetime=dt.timedelta(hours=1),
        )
        for name, data in (
            ("ca.crt", ca.cert),
            ("tls.crt", leaf.cert),
            ("tls.key", leaf.key),
            ("secret.key", secret_key),
        ):
            (workdir / name).write_bytes(data)
        self.https = free_port()
        self.url = f"https://localhost:{self.https}"
        self.context = ssl.create_default_context(cadata=ca.cert.decode())
        conf = workdir / "standalone.conf"
        conf.write_text(
            "brokerServicePort=\nwebServicePort=\n"
            f"brokerServicePortTls={free_port()}\nwebServicePortTls={self.https}\n"
            f"bindAddress={LOOPBACK}\nadvertisedAddress=localhost\n"
            f"tlsCertificateFilePath={workdir}/tls.crt\ntlsKeyFilePath={workdir}/tls.key\n"
            f"tlsTrustCertsFilePath={workdir}/ca.crt\n"
            "authenticationEnabled=true\n"
            "authenticationProviders="
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n"
            f"tokenSecretKey=file://{workdir}/secret.key\n"
            "authorizationEnabled=true\nsuperUserRoles=magnetar-operator\n"
        )
        exe = str(Path(sys.executable).with_name("magnetar"))
        self.proc = Proc(
            [
                exe,
                "standalone",
                f"--config={conf}",
                f"--data-dir={workdir / 'data'}",
                f"--bookie-port={free_port()}",
            ],
            log_path=workdir / "standalone.log",
            ready=self._serving,
            ready_timeout=60,
        ).start()

    def _serving(self) -> bool:
        return self.get("/status.html") == 200

    def get(self, path: str, token: str | None = None) -> int:
        req = urllib.request.Request(self.url + path)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5, context=self.context) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    def stop(self) -> None:
        self.proc.stop()


@pytest.fixture
def secured_cluster(
    api: client.ApiClient,
    operator: Proc,
    namespace: str,
    kubelet: FakeKubelet,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[CR, SecuredStandalone, str]]:
    """A secured PulsarCluster whose admin API (annotation ``magnetar.dev/admin-url``) is a
    standalone secured with the cluster's own CA and signing key."""
    cr = CR(api, namespace)
    core = client.CoreV1Api(api)
    make_cluster(cr, "sec", SPEC)
    eventually(lambda: ready(cr, "pulsarclusters", "sec"), timeout=90, what="Ready")
    ca = secret_data(core, namespace, "sec-ca")
    key = secret_data(core, namespace, "sec-token-key")["secret.key"]
    token = secret_data(core, namespace, "sec-tokens")["operator.token"].decode()
    backend = SecuredStandalone(
        tmp_path_factory.mktemp("secured-admin"),
        ca=pki.KeyPair(ca["ca.crt"], ca["ca.key"]),
        secret_key=key,
    )
    try:
        cr.patch(
            "pulsarclusters",
            "sec",
            {"metadata": {"annotations": {"magnetar.dev/admin-url": backend.url}}},
        )
        yield cr, backend, token
    finally:
        backend.stop()


def test_tenant_and_topic_through_the_authenticated_admin_api(
    secured_cluster: tuple[CR, SecuredStandalone, str],
) -> None:
    cr, backend, token = secured_cluster
    # the admin API refuses a caller without the operator's token, and trusts only the CA
    assert backend.get("/admin/v2/tenants") == 401
    assert backend.get("/admin/v2/tenants", token=token) == 200
    ref = {"name": "sec", "clusterName": "standalone"}
    cr.create(
        "tenants",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": "acme"},
            "spec": {"clusterRef": ref, "name": "acme", "namespaces": [{"name": "orders"}]},
        },
    )
    cr.create(
        "topics",
        {
            "apiVersion": "magnetar.dev/v1alpha1",
            "kind": "Topic",
            "metadata": {"name": "created"},
            "spec": {
                "clusterRef": ref,
                "tenant": "acme",
                "namespace": "orders",
                "name": "created",
                "partitions": 2,
            },
        },
    )
    eventually(
        lambda: ready(cr, "tenants", "acme") and ready(cr, "topics", "created"),
        timeout=60,
        what="Tenant and Topic Ready through the secured admin API",
    )
    assert cr.get("topics", "created")["status"]["adminUrl"] == backend.url
    assert backend.get("/admin/v2/persistent/acme/orders/created/partitions", token=token) == 200
    assert backend.get("/admin/v2/persistent/acme/orders/created/partitions") == 401
    # deletion goes through the same credentials (the finalizers)
    cr.delete("topics", "created")
    cr.delete("tenants", "acme")
    eventually(
        lambda: not cr.exists("topics", "created") and not cr.exists("tenants", "acme"),
        timeout=60,
        what="Tenant and Topic deleted",
    )
    assert backend.get("/admin/v2/tenants/acme", token=token) == 404


# --- cert-manager: Certificates as objects (cert-manager itself does not run here) ----------
CERTIFICATE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "certificates.cert-manager.io"},
    "spec": {
        "group": "cert-manager.io",
        "names": {"kind": "Certificate", "plural": "certificates", "singular": "certificate"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
"""A stand-in for cert-manager's CRD (its schema left open): the API server then stores the
operator's Certificates, which the test reads back; the test plays cert-manager as the
suite's FakeKubelet plays kubelet, writing the Secrets a Certificate asks for."""


def test_cert_manager_issuer(
    api: client.ApiClient, operator: Proc, namespace: str, kubelet: FakeKubelet
) -> None:
    cr = CR(api, namespace)
    core = client.CoreV1Api(api)
    spec = {**SPEC, "tls": {"enabled": True, "issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}}
    spec.pop("auth")
    make_cluster(cr, "cm", spec)

    def certificates_condition() -> dict[str, Any]:
        cond = condition(cr.get("pulsarclusters", "cm"), "CertificatesReady")
        assert cond is not None
        return cond

    # without cert-manager's CRD: said so, nothing pretends to be Ready
    cond = eventually(
        lambda: (c := certificates_condition())["reason"] == "CertManagerMissing" and c,
        timeout=30,
        what="CertManagerMissing",
    )
    assert cond["status"] == "False"
    assert condition(cr.get("pulsarclusters", "cm"), "Ready")["status"] == "False"
    assert not [
        s for s in core.list_namespaced_secret(namespace).items if "-tls" in s.metadata.name
    ]

    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(CERTIFICATE_CRD)
    try:
        eventually(lambda: helpers.crd_established(ext, "certificates.cert-manager.io"), timeout=30)
        objects = client.CustomObjectsApi(api)

        def certificates() -> dict[str, dict[str, Any]]:
            items = objects.list_namespaced_custom_object(
                "cert-manager.io", "v1", namespace, "certificates"
            )["items"]
            assert len(items) == 5
            proxy = next(i for i in items if i["metadata"]["name"] == "cm-proxy-tls")
            assert len(proxy["spec"].get("ipAddresses", ())) == 2, "its cluster IP too"
            return {i["metadata"]["name"]: i for i in items}

        certs = eventually(certificates, timeout=30, what="5 Certificates")
        assert set(certs) == {
            "cm-etcd-tls",
            "cm-bookie-tls",
            "cm-broker-tls",
            "cm-autorecovery-tls",
            "cm-proxy-tls",
        }
        cluster_ip = core.read_namespaced_service("cm-proxy", namespace).spec.cluster_ip
        assert cluster_ip in certs["cm-proxy-tls"]["spec"]["ipAddresses"]
        broker = certs["cm-broker-tls"]["spec"]
        assert broker["issuerRef"] == {
            "name": "ca",
            "kind": "ClusterIssuer",
            "group": "cert-manager.io",
        }
        assert broker["secretName"] == "cm-broker-tls"
        assert f"cm-broker.{namespace}.svc" in broker["dnsNames"]
        assert (broker["duration"], broker["renewBefore"]) == ("7776000s", "2592000s")  # defaults
        assert (
            f"cm-bookie-1.cm-bookie.{namespace}.svc" in certs["cm-bookie-tls"]["spec"]["dnsNames"]
        )
        eventually(
            lambda: certificates_condition()["reason"] == "WaitingForCertManager",
            timeout=30,
            what="WaitingForCertManager",
        )
        # cert-manager's part: a CA of its own signs each Certificate into its Secret
        ca = pki.create_ca("cert-manager CA", now=dt.datetime.now(dt.UTC))
        for name, cert in certs.items():
            leaf = pki.issue(
                ca,
                common_name=name,
                names=[*cert["spec"]["dnsNames"], *cert["spec"].get("ipAddresses", [])],
                now=dt.datetime.now(dt.UTC),
                lifetime=dt.timedelta(hours=48),
            )
            core.create_namespaced_secret(
                namespace,
                {
                    "metadata": {"name": name},
                    "type": "kubernetes.io/tls",
                    "data": {
                        k: base64.b64encode(v).decode()
                        for k, v in (
                            ("tls.crt", leaf.cert),
                            ("tls.key", leaf.key),
                            ("ca.crt", ca.cert),
                        )
                    },
                },
            )
        eventually(lambda: ready(cr, "pulsarclusters", "cm"), timeout=60, what="Ready")
        assert certificates_condition()["reason"] == "Issued"
        # the operator made no CA of its own and left cert-manager's Secrets as they were
        names = {s.metadata.name for s in core.list_namespaced_secret(namespace).items}
        assert "cm-ca" not in names
        assert secret_data(core, namespace, "cm-broker-tls")["ca.crt"] == ca.cert
    finally:
        ext.delete_custom_resource_definition("certificates.cert-manager.io")
