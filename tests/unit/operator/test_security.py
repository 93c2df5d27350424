"""``spec.tls`` and ``spec.auth`` without a cluster: the operator's CA and certificates
(names, usages, renewal decisions), tokens, and what each component mounts and is told."""

from __future__ import annotations

import datetime as dt
import ssl
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from magnetar import cli, conffile
from magnetar_operator import pki, tokens
from magnetar_operator.builders import (
    autorecovery,
    bookie,
    broker,
    build_all,
    etcd,
    monitoring,
    proxy,
    security,
)
from magnetar_operator.spec import ClusterSpec, duration_seconds
from tests.unit.operator.schemas import validate
from tests.unit.operator.test_builders import OWNER, SPECS, by_kind_name

NOW = dt.datetime(2026, 11, 27, 3, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
SECURED = ClusterSpec.parse(SPECS["secured-3"])


def container(obj: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return c


def mounts(obj: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container(obj)["volumeMounts"]}


def volumes(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}


def test_durations_in_cert_managers_form() -> None:
    assert duration_seconds("2160h") == 2160 * 3600
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("45s") == 45
    for bad in ("", "10", "h", "1d", "-1h", "0s"):
        with pytest.raises(ValueError, match="duration"):
            duration_seconds(bad)
    spec = ClusterSpec.parse({"tls": {"enabled": True, "duration": "48h", "renewBefore": "12h"}})
    assert (spec.tls.duration_s, spec.tls.renew_before_s, spec.tls.issuer) == (172800, 43200, None)


def test_subjects_name_every_service_and_pod() -> None:
    subjects = {s.component: s for s in security.subjects(OWNER, SECURED)}
    assert set(subjects) == {"etcd", "bookie", "broker", "autorecovery", "proxy"}
    etcd_names = set(subjects["etcd"].names)
    for i in range(3):  # production: 3 members, each under the headless Service
        assert f"dev-etcd-{i}.dev-etcd.pulsar.svc" in etcd_names
        assert f"dev-etcd-{i}.dev-etcd.pulsar.svc.cluster.local" in etcd_names
    assert {"dev-etcd-client.pulsar.svc", "dev-etcd-client", "localhost"} <= etcd_names
    bookie_names = set(subjects["bookie"].names)
    replicas = SECURED.bookies.replicas
    # exactly the names bookies advertise (their --advertised-address), one per ordinal
    assert {f"dev-bookie-{i}.dev-bookie.pulsar.svc" for i in range(replicas)} <= bookie_names
    assert f"dev-bookie-{replicas}.dev-bookie.pulsar.svc" not in bookie_names
    assert "dev-broker.pulsar.svc" in subjects["broker"].names  # the admin URL's host
    assert {s.secret for s in subjects.values()} == {
        "dev-etcd-tls",
        "dev-bookie-tls",
        "dev-broker-tls",
        "dev-autorecovery-tls",
        "dev-proxy-tls",
    }
    assert subjects["autorecovery"].names == ("dev-autorecovery",), "a client certificate"
    assert "dev-proxy.pulsar.svc" in subjects["proxy"].names  # the proxy URL's host
    service = {
        "spec": {
            "clusterIP": "10.96.0.20",
            "clusterIPs": ["10.96.0.20"],
            "externalIPs": ["1.2.3.4"],
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "lb.example"}]}},
    }
    addresses = security.service_addresses(service)
    assert addresses == ("10.96.0.20", "1.2.3.4", "5.6.7.8", "lb.example")
    spec = ClusterSpec.parse(
        {**SPECS["secured-3"], "proxy": {"enabled": True, "certificateNames": ["pulsar.example"]}}
    )
    proxy_names = {
        s.component: s for s in security.subjects(OWNER, spec, proxy_addresses=addresses)
    }["proxy"].names
    assert {*addresses, "pulsar.example", "dev-proxy", "localhost"} <= set(proxy_names)
    assert security.service_addresses(None) == ()
    headless = {"spec": {"clusterIP": "None"}}
    assert security.service_addresses(headless) == ()
    no_proxy = ClusterSpec.parse({**SPECS["secured-3"], "proxy": {"enabled": False}})
    assert "proxy" not in {s.component for s in security.subjects(OWNER, no_proxy)}


def test_issued_certificates_chain_to_the_ca_for_the_names_and_both_usages() -> None:
    ca = pki.create_ca("dev CA", now=NOW)
    names = ["dev-broker.pulsar.svc", "localhost", "127.0.0.1"]
    leaf = pki.issue(ca, common_name="dev-broker", names=names, now=NOW, lifetime=90 * DAY)
    cert = x509.load_pem_x509_certificate(leaf.cert)
    assert pki.signed_by(leaf.cert, ca.cert) and pki.key_matches(leaf.cert, leaf.key)
    assert pki.names_of(leaf.cert) == set(names)
    assert cert.not_valid_after_utc == NOW + 90 * DAY
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    # and OpenSSL takes the pair (what the brokers' and the official clients' TLS is)
    ctx = ssl.create_default_context(cadata=ca.cert.decode())
    assert ctx.cert_store_stats()["x509_ca"] == 1
    other = pki.create_ca("other", now=NOW)
    assert not pki.signed_by(leaf.cert, other.cert)


def test_why_reissue() -> None:
    ca = pki.create_ca("dev CA", now=NOW)
    names = ["a.svc", "b.svc"]
    leaf = pki.issue(ca, common_name="x", names=names, now=NOW, lifetime=90 * DAY)
    margin = 30 * DAY

    def why(current: pki.KeyPair | None, *, at: dt.datetime = NOW, **kw: Any) -> str | None:
        args: dict[str, Any] = {"ca_cert": ca.cert, "names": names, **kw}
        return pki.why_reissue(current, now=at, renew_before=margin, **args)

    assert why(leaf) is None
    assert why(leaf, at=NOW + 59 * DAY) is None
    assert "expires in" in str(why(leaf, at=NOW + 61 * DAY)), "inside the renewal margin"
    assert why(None) == "missing"
    assert "names changed (c.svc)" == why(leaf, names=[*names, "c.svc"])
    assert why(leaf, ca_cert=pki.create_ca("new", now=NOW).cert) == "not signed by the current CA"
    other = pki.issue(ca, common_name="x", names=names, now=NOW, lifetime=90 * DAY)
    assert why(pki.KeyPair(leaf.cert, other.key)) == "the key does not belong to the certificate"
    assert str(why(pki.KeyPair(b"garbage", leaf.key))).startswith("unreadable")


def test_ca_bundle_keeps_the_previous_ca_while_it_is_valid() -> None:
    old = pki.create_ca("old", now=NOW - 3640 * DAY)  # expires in 10 days
    new = pki.create_ca("new", now=NOW)
    assert pki.ca_bundle(new.cert, old.cert, now=NOW) == new.cert + old.cert
    assert pki.ca_bundle(new.cert, old.cert, now=NOW + 11 * DAY) == new.cert
    assert pki.ca_bundle(new.cert, None, now=NOW) == new.cert


def test_tokens_for_each_key_form() -> None:
    key = tokens.signing_key(tokens.generate_secret_key())
    assert (key.algorithm, key.verification.item) == ("HS256", "secret.key")
    token = tokens.mint(key, "magnetar-operator")
    assert tokens.valid_for(token, key, "magnetar-operator")
    assert not tokens.valid_for(token, key, "someone-else")
    other = tokens.signing_key(tokens.generate_secret_key())
    assert not tokens.valid_for(token, other, "magnetar-operator"), "a new key: mint again"
    assert not tokens.valid_for("", key, "magnetar-operator")
    # a key pair as `magnetar tokens create-key-pair` writes it (DER), RSA and EC
    from magnetar.security import tokens as magnetar_tokens

    for alg in ("RS256", "ES256"):
        private, public = magnetar_tokens.create_key_pair(alg)
        pair = tokens.signing_key({"private.key": private, "public.key": public})
        assert (pair.algorithm, pair.verification.item) == (alg, "public.key")
        minted = tokens.mint(pair, "magnetar-broker")
        # what the broker checks it with: tokenPublicKey, the public key alone
        public_key = magnetar_tokens.load_public_key(public)
        assert jwt.decode(minted, public_key, algorithms=[alg])["sub"] == "magnetar-broker"
    assert other.verification.digest != key.verification.digest
    with pytest.raises(ValueError, match="neither"):
        tokens.signing_key({"other": b"x"})


def test_secured_objects_are_valid_and_mount_their_secrets() -> None:
    objs = by_kind_name(build_all(OWNER, SECURED))
    for obj in objs.values():
        validate(obj)
    sts = objs[("StatefulSet", "dev-etcd")]
    assert mounts(sts)["tls"] == etcd.TLS_DIR
    assert volumes(sts)["tls"]["secret"] == {"secretName": "dev-etcd-tls", "defaultMode": 0o440}
    args = container(sts)["command"]
    assert "--client-cert-auth" in args and "--peer-client-cert-auth" in args
    assert f"--trusted-ca-file={etcd.TLS_DIR}/ca.crt" in args
    assert "--listen-client-urls=https://0.0.0.0:2379" in args
    assert any(a.startswith("--initial-cluster=dev-etcd-0=https://") for a in args)
    assert "--listen-metrics-urls=http://0.0.0.0:2381" in args, "the probes' port"

    bk = objs[("StatefulSet", "dev-bookie")]
    assert mounts(bk)["tls"] == bookie.TLS_DIR
    assert volumes(bk)["tls"]["secret"]["secretName"] == "dev-bookie-tls"
    conf = bookie.config_data(OWNER, SECURED)
    assert conf["tlsClientAuthentication"] == "true"
    assert conf["tlsCertificatePath"] == f"{bookie.TLS_DIR}/tls.crt"
    assert conf["metadataServiceUri"] == "etcd:https://dev-etcd-client.pulsar.svc:2379"
    cm = objs[("ConfigMap", "dev-bookie")]["data"]
    assert f"tlsCertificateFilePath: {bookie.TLS_DIR}/tls.crt" in cm["etcd.yaml"]

    dep = objs[("Deployment", "dev-broker")]
    assert mounts(dep)["tls"] == broker.TLS_DIR and mounts(dep)["auth"] == broker.AUTH_DIR
    sources = volumes(dep)["auth"]["projected"]["sources"]
    assert [s["secret"]["name"] for s in sources] == ["keys", "dev-tokens"]
    items = [i["key"] for s in sources for i in s["secret"]["items"]]
    assert items == ["secret.key", "broker.token"], "never the operator's token or a private key"
    c = container(dep)
    assert {p["containerPort"] for p in c["ports"]} == {6651, 8443}, "plaintext ports off"
    assert c["readinessProbe"]["httpGet"] == {
        "path": "/status.html",
        "port": "https",
        "scheme": "HTTPS",
    }
    svc = objs[("Service", "dev-broker")]["spec"]
    assert {p["port"] for p in svc["ports"]} == {6651, 8443}

    px = objs[("Deployment", "dev-proxy")]
    assert mounts(px)["tls"] == proxy.TLS_DIR and mounts(px)["auth"] == proxy.AUTH_DIR
    assert volumes(px)["tls"]["secret"]["secretName"] == "dev-proxy-tls"
    sources = volumes(px)["auth"]["projected"]["sources"]
    items = [i["key"] for s in sources for i in s["secret"]["items"]]
    assert items == ["secret.key", "proxy.token"], "the proxy's own token, no other"
    c = container(px)
    assert {p["containerPort"] for p in c["ports"]} == {6651, 8443}, "plaintext ports off"
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert c["livenessProbe"]["tcpSocket"] == {"port": "pulsar-tls"}
    svc = objs[("Service", "dev-proxy")]["spec"]
    assert {(p["name"], p["port"]) for p in svc["ports"]} == {("pulsar-tls", 6651), ("https", 8443)}


def test_secured_autorecovery_deployment() -> None:
    """With ``spec.tls`` the bookies run no autorecovery; a Deployment of ``magnetar
    autorecovery`` does, presenting its own certificate to etcd and to the bookies (both
    require a client certificate of the cluster's CA), with no Kubernetes credentials."""
    spec = ClusterSpec.parse(
        {
            **SPECS["secured-3"],
            "autorecovery": {
                "replicas": 2,
                "resources": {"limits": {"cpu": "1", "memory": "256Mi"}},
                "extraArgs": ["--lost-bookie-recovery-delay=60"],
            },
        }
    )
    assert "autoRecoveryDaemonEnabled" not in bookie.config_data(OWNER, spec)
    objs = by_kind_name(build_all(OWNER, spec))
    dep = objs[("Deployment", "dev-autorecovery")]
    validate(dep)
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False, "RBAC-free: no token in the pod"
    assert "serviceAccountName" not in pod
    assert volumes(dep) == {
        "tls": {
            "name": "tls",
            "secret": {"secretName": "dev-autorecovery-tls", "defaultMode": 0o440},
        }
    }, "its own certificate, never the bookies' or the brokers' key"
    assert mounts(dep) == {"tls": autorecovery.TLS_DIR}
    c = container(dep)
    assert c["image"] == spec.images.broker
    assert c["resources"] == {"limits": {"cpu": "1", "memory": "256Mi"}}
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["ports"] == [{"name": "http", "containerPort": autorecovery.HTTP_PORT}]
    assert c["args"][-1] == "--lost-bookie-recovery-delay=60", "extraArgs come last"

    # the arguments are what `magnetar autorecovery` parses into TLS to etcd and to bookies
    args = cli.parse_args(c["args"])
    assert args.command == "autorecovery" and args.http_port == autorecovery.HTTP_PORT
    assert args.metadata_url == "etcd://dev-etcd-client.pulsar.svc:2379?tls=true"
    assert args.lost_bookie_recovery_delay == 60.0
    tls_dir = autorecovery.TLS_DIR
    for config in (cli.metadata_tls(args), cli.bookkeeper_tls(args)):
        assert config is not None
        assert config.files.cert_file is not None and config.files.key_file is not None
        assert str(config.files.cert_file) == f"{tls_dir}/tls.crt"
        assert str(config.files.key_file) == f"{tls_dir}/tls.key"
        assert str(config.files.trust_file) == f"{tls_dir}/ca.crt"

    # its /metrics behind a headless Service with a port named http: the chart's
    # ServiceMonitor selects it as the brokers' and bookies', spec.monitoring monitors it
    svc = objs[("Service", "dev-autorecovery")]
    validate(svc)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8001, "targetPort": "http"}]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "magnetar-operator"
    monitored = ClusterSpec.parse({**SPECS["secured-3"], "monitoring": {"enabled": True}})
    monitors = {m["metadata"]["name"]: m for m in monitoring.build(OWNER, monitored)}
    assert monitors["dev-autorecovery"]["spec"]["endpoints"][0]["port"] == "http"
    plain_monitors = monitoring.build(OWNER, ClusterSpec.parse({"monitoring": {"enabled": True}}))
    assert "dev-autorecovery" not in {m["metadata"]["name"] for m in plain_monitors}

    defaults = container(autorecovery.deployment(OWNER, SECURED))
    assert defaults["resources"] == {"requests": autorecovery.DEFAULT_REQUESTS}
    plain = ClusterSpec.parse(SPECS["production"])
    assert autorecovery.build(OWNER, plain) == [], "without TLS the bookies run it"
    assert bookie.config_data(OWNER, plain)["autoRecoveryDaemonEnabled"] == "true"


def test_autorecovery_settings_of_the_bookie_config_apply_with_tls(tmp_path: Any) -> None:
    """The auditor's and workers' keys of ``spec.bookies.config`` (what an in-process
    autorecovery reads from bookkeeper.conf) reach the Deployment as flags that parse to the
    same values ``magnetar bookie --config`` reads from the file; extraArgs win."""
    settings = {
        "auditorLostBookieRecoveryDelay": "45",
        "auditorPeriodicCheckInterval": "3600",
        "openLedgerRereplicationGracePeriod": "12500",
        "minNumRacksPerWriteQuorum": "2",
        "enforceMinNumRacksPerWriteQuorum": "true",
        "replicationRateByBytes": "1048576",
    }
    spec = ClusterSpec.parse({**SPECS["secured-3"], "bookies": {"config": settings}})
    conf = tmp_path / "bookkeeper.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    from_file = conffile.load(conf, conffile.BOOKIE)
    args = cli.parse_args(autorecovery.args(OWNER, spec))
    assert from_file == {
        "lost_bookie_recovery_delay": 45.0,
        "periodic_check_interval": 3600.0,
        "open_ledger_grace": 12.5,
        "min_racks_per_write_quorum": 2,
        "enforce_min_racks_per_write_quorum": True,
        "replication_rate_by_bytes": 1048576,
    }
    for dest, value in from_file.items():
        assert getattr(args, dest) == value, dest

    later = ClusterSpec.parse(
        {
            **SPECS["secured-3"],
            "bookies": {"config": settings},
            "autorecovery": {"extraArgs": ["--lost-bookie-recovery-delay=5"]},
        }
    )
    assert cli.parse_args(autorecovery.args(OWNER, later)).lost_bookie_recovery_delay == 5.0
    bad = ClusterSpec.parse(
        {**SPECS["secured-3"], "bookies": {"config": {"openLedgerRereplicationGracePeriod": "x"}}}
    )
    with pytest.raises(SystemExit):  # refused by the command, naming the flag
        cli.parse_args(autorecovery.args(OWNER, bad))
    # BookKeeper's name for the delay; beside Magnetar's earlier name, BookKeeper's wins
    bookkeepers = {"lostBookieRecoveryDelay": "300"}
    for config in (bookkeepers, {**settings, **bookkeepers}):
        both = ClusterSpec.parse({**SPECS["secured-3"], "bookies": {"config": config}})
        assert cli.parse_args(autorecovery.args(OWNER, both)).lost_bookie_recovery_delay == 300.0


def test_secured_proxy_conf() -> None:
    """The proxy authenticates clients itself and acts as ``magnetar-proxy`` towards the
    brokers, which list that role in proxyRoles (so they authorize the forwarded client)."""
    conf = proxy.config_data(OWNER, SECURED)
    assert (conf["servicePort"], conf["webServicePort"]) == ("", "")
    assert (conf["servicePortTls"], conf["webServicePortTls"]) == ("6651", "8443")
    assert conf["tlsEnabledWithBroker"] == "true"
    assert conf["brokerClientTrustCertsFilePath"] == f"{proxy.TLS_DIR}/ca.crt"
    assert conf["metadataStoreConfigPath"] == f"{proxy.CONFIG_DIR}/etcd.yaml"
    assert conf["authenticationEnabled"] == "true"
    assert conf["tokenSecretKey"] == f"file://{proxy.AUTH_DIR}/secret.key"
    assert conf["brokerClientAuthenticationParameters"] == f"file://{proxy.AUTH_DIR}/proxy.token"
    assert "authorizationEnabled" not in conf, "the brokers authorize"
    brokers = broker.config_data(OWNER, SECURED)
    assert brokers["proxyRoles"] == "magnetar-proxy"
    assert "magnetar-proxy" in brokers["superUserRoles"].split(",")
    assert proxy.service_url(OWNER, SECURED) == "pulsar+ssl://dev-proxy.pulsar.svc:6651"
    assert proxy.admin_url(OWNER, SECURED) == "https://dev-proxy.pulsar.svc:8443"
    plain = ClusterSpec.parse({"proxy": {"enabled": True}})
    assert "proxyRoles" not in broker.config_data(OWNER, plain)
    assert proxy.service_url(OWNER, plain) == "pulsar://dev-proxy.pulsar.svc:6650"


def test_secured_broker_conf() -> None:
    conf = broker.config_data(OWNER, SECURED)
    assert (conf["brokerServicePort"], conf["webServicePort"]) == ("", "")
    assert (conf["brokerServicePortTls"], conf["webServicePortTls"]) == ("6651", "8443")
    assert conf["bookkeeperTLSClientAuthentication"] == "true"
    assert conf["metadataStoreUrl"] == "etcd:https://dev-etcd-client.pulsar.svc:2379"
    assert conf["metadataStoreConfigPath"] == f"{broker.CONFIG_DIR}/etcd.yaml"
    assert conf["authenticationEnabled"] == conf["authorizationEnabled"] == "true"
    assert conf["tokenSecretKey"] == f"file://{broker.AUTH_DIR}/secret.key"
    assert conf["superUserRoles"].split(",")[:2] == ["magnetar-operator", "magnetar-broker"]
    assert conf["brokerClientAuthenticationParameters"] == f"file://{broker.AUTH_DIR}/broker.token"
    pair = broker.config_data(OWNER, SECURED, verification=tokens.Verification("public.key"))
    assert pair["tokenPublicKey"] == f"file://{broker.AUTH_DIR}/public.key"
    assert "tokenSecretKey" not in pair
    assert broker.service_url(OWNER, SECURED) == "pulsar+ssl://dev-broker.pulsar.svc:6651"
    assert broker.admin_url(OWNER, SECURED) == "https://dev-broker.pulsar.svc:8443"


def test_rendered_etcd_settings_are_what_the_processes_read(tmp_path: Any) -> None:
    for builder in (broker, bookie, proxy):
        cm = builder.config_map(OWNER, SECURED)
        path = tmp_path / "etcd.yaml"
        path.write_text(cm["data"]["etcd.yaml"])
        settings = conffile.metadata_store_config(path)
        tls_dir = builder.TLS_DIR
        assert settings == {
            "use_tls": True,
            "trust_certs_file": f"{tls_dir}/ca.crt",
            "cert_file": f"{tls_dir}/tls.crt",
            "key_file": f"{tls_dir}/tls.key",
        }


def test_cert_manager_certificates() -> None:
    spec = ClusterSpec.parse(
        {
            **SPECS["secured"],
            "tls": {"enabled": True, "issuerRef": {"name": "ca-issuer", "kind": "ClusterIssuer"}},
        }
    )
    subjects = {s.component: s for s in security.subjects(OWNER, spec)}
    cert = security.certificate(OWNER, spec, subjects["broker"])
    assert cert["apiVersion"] == "cert-manager.io/v1" and cert["kind"] == "Certificate"
    assert cert["metadata"]["ownerReferences"] == [OWNER.owner_reference()]
    body = cert["spec"]
    assert body["secretName"] == "dev-broker-tls", "the Secret the brokers mount either way"
    assert body["issuerRef"] == {
        "name": "ca-issuer",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert "dev-broker.pulsar.svc" in body["dnsNames"] and body["ipAddresses"] == ["127.0.0.1"]
    assert (body["duration"], body["renewBefore"]) == ("7776000s", "2592000s")
    assert set(body["usages"]) >= {"server auth", "client auth"}
    assert body["privateKey"]["encoding"] == "PKCS8"


@pytest.mark.parametrize("builder", [broker, proxy])
def test_a_new_signing_key_restarts_the_brokers_and_proxies(builder: Any) -> None:
    """Brokers and proxies read their verification key at startup: its digest is in their
    template."""

    def template_hash(digest: str) -> str:
        v = tokens.Verification("secret.key", digest)
        dep = builder.deployment(OWNER, SECURED, verification=v)
        return str(dep["spec"]["template"]["metadata"]["annotations"]["magnetar.dev/config-hash"])

    assert template_hash("aaaa") != template_hash("bbbb")
    assert template_hash("aaaa") == template_hash("aaaa")
