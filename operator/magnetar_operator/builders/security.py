"""TLS and authentication objects of a PulsarCluster: names, certificate subjects, Secrets,
cert-manager Certificates, and the volumes and settings the components mount them with.

Why one module: the etcd, bookie and broker builders and the reconcile step (``security``)
must agree on every Secret name, key name and mount path; they all read them from here.

Secrets (``<cluster>`` is the PulsarCluster's name):

* ``<cluster>-ca`` -- the operator's CA (``ca.crt``, ``ca.key``), without an issuer only;
* ``<cluster>-<component>-tls`` for etcd, bookie, broker, autorecovery (a client
  certificate only) and (when enabled) proxy -- ``tls.crt``, ``tls.key``, ``ca.crt``, the
  layout cert-manager writes, so the mounts are the same either way;
* the signing key (``spec.auth.secretName``, default ``<cluster>-token-key``) and
  ``<cluster>-tokens`` (``operator.token``, ``broker.token`` and, with a proxy,
  ``proxy.token``: super-user tokens the operator mints).
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar_operator.builders import common
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec, Json

CA_CERT, TLS_CERT, TLS_KEY, CA_KEY = "ca.crt", "tls.crt", "tls.key", "ca.key"
OPERATOR_ROLE = "magnetar-operator"
BROKER_ROLE = "magnetar-broker"
PROXY_ROLE = "magnetar-proxy"
"""The proxy's own role: a super-user and the brokers' ``proxyRoles``, so a broker
authorizes the client the proxy forwards (its original principal), as Pulsar's chart does."""
OPERATOR_TOKEN = "operator.token"  # noqa: S105  (a key name in a Secret)
BROKER_TOKEN = "broker.token"  # noqa: S105
PROXY_TOKEN = "proxy.token"  # noqa: S105
CERT_MANAGER_API = "cert-manager.io/v1"
CLUSTER_DOMAIN = "cluster.local"
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"  # noqa: S105
TOKEN_CLIENT_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"  # noqa: S105
SECRET_MODE = 0o440
"""Mounted key files: readable by the pod's user and fsGroup only."""


def ca_secret_name(owner: Owner) -> str:
    return owner.name_of("ca")


def tls_secret_name(owner: Owner, component: str) -> str:
    return owner.name_of(f"{component}-tls")


def signing_secret_name(owner: Owner, spec: ClusterSpec) -> str:
    return spec.auth.secret_name or owner.name_of("token-key")


def tokens_secret_name(owner: Owner) -> str:
    return owner.name_of("tokens")


def dns_forms(service: str, namespace: str) -> list[str]:
    """Every name a Service answers to from inside the cluster."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{CLUSTER_DOMAIN}",
    ]


def pod_forms(statefulset: str, service: str, namespace: str, replicas: int) -> list[str]:
    """The stable DNS names of a StatefulSet's pods under its headless Service."""
    out = []
    for i in range(replicas):
        out += [
            f"{statefulset}-{i}.{service}.{namespace}.svc",
            f"{statefulset}-{i}.{service}.{namespace}.svc.{CLUSTER_DOMAIN}",
        ]
    return out


@dataclass(frozen=True)
class Subject:
    """One certificate the cluster needs: its Secret, common name and names (SANs)."""

    component: str
    secret: str
    common_name: str
    names: tuple[str, ...]


def subjects(
    owner: Owner, spec: ClusterSpec, *, proxy_addresses: tuple[str, ...] = ()
) -> list[Subject]:
    """The certificates of a cluster with ``spec.tls``: etcd (server, peer and its own
    client), the bookies (each pod's advertised name), the brokers (their Service), the
    autorecovery Deployment (a client of etcd and the bookies only: its name is its only
    name), the proxy when enabled (its Service's names and
    ``proxy_addresses`` -- its cluster IP and load-balancer addresses, once it has them --
    plus ``spec.proxy.certificateNames``: what clients outside the cluster reach it by)."""
    ns = owner.namespace
    out = []
    if spec.metadata.managed:
        sts, peer, client = (
            owner.name_of("etcd"),
            owner.name_of("etcd"),
            owner.name_of("etcd-client"),
        )
        names = pod_forms(sts, peer, ns, spec.metadata.etcd_replicas)
        names += dns_forms(client, ns) + dns_forms(peer, ns) + ["localhost", "127.0.0.1"]
        out.append(Subject("etcd", tls_secret_name(owner, "etcd"), sts, tuple(names)))
    bk = owner.name_of("bookie")
    out.append(
        Subject(
            "bookie",
            tls_secret_name(owner, "bookie"),
            bk,
            tuple(pod_forms(bk, bk, ns, spec.bookies.replicas) + dns_forms(bk, ns)),
        )
    )
    br = owner.name_of("broker")
    out.append(
        Subject(
            "broker",
            tls_secret_name(owner, "broker"),
            br,
            (*dns_forms(br, ns), "localhost", "127.0.0.1"),
        )
    )
    ar = owner.name_of("autorecovery")
    out.append(Subject("autorecovery", tls_secret_name(owner, "autorecovery"), ar, (ar,)))
    if spec.proxy.enabled:
        px = owner.name_of("proxy")
        proxy_names = [
            *dns_forms(px, ns),
            "localhost",
            "127.0.0.1",
            *proxy_addresses,
            *spec.proxy.certificate_names,
        ]
        out.append(
            Subject("proxy", tls_secret_name(owner, "proxy"), px, tuple(dict.fromkeys(proxy_names)))
        )
    return out


def service_addresses(service: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The addresses a Service is reached by: its cluster IPs, external IPs and load-balancer
    ingress (IPs and host names); () before it exists."""
    spec = (service or {}).get("spec") or {}
    ingress = (((service or {}).get("status") or {}).get("loadBalancer") or {}).get("ingress")
    out = [ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip and ip != "None"]
    out += [str(ip) for ip in spec.get("externalIPs") or ()]
    for entry in ingress or ():
        out += [str(v) for k, v in entry.items() if k in ("ip", "hostname") and v]
    return tuple(dict.fromkeys(out))


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def secret(
    owner: Owner, component: str, name: str, data: Mapping[str, bytes], *, type_: str = "Opaque"
) -> Json:
    """A Secret owned by the cluster (deleted with it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": common.metadata(owner, component, name=name),
        "type": type_,
        "data": {k: _b64(v) for k, v in sorted(data.items())},
    }


def tls_secret(owner: Owner, subject: Subject, *, cert: bytes, key: bytes, ca: bytes) -> Json:
    return secret(
        owner,
        subject.component,
        subject.secret,
        {TLS_CERT: cert, TLS_KEY: key, CA_CERT: ca},
        type_="kubernetes.io/tls",
    )


def certificate(owner: Owner, spec: ClusterSpec, subject: Subject) -> Json:
    """A cert-manager Certificate for ``subject`` (``spec.tls.issuerRef``): cert-manager
    writes the same Secret the operator would, and renews it ``renewBefore`` its expiry."""
    issuer = spec.tls.issuer
    assert issuer is not None
    dns = [n for n in subject.names if not _is_ip(n)]
    ips = [n for n in subject.names if _is_ip(n)]
    body: Json = {
        "secretName": subject.secret,
        "commonName": subject.common_name,
        "dnsNames": dns,
        "duration": f"{spec.tls.duration_s}s",
        "renewBefore": f"{spec.tls.renew_before_s}s",
        "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
        "privateKey": {
            "algorithm": "ECDSA",
            "size": 256,
            "encoding": "PKCS8",
            "rotationPolicy": "Always",
        },
        "usages": ["digital signature", "key encipherment", "server auth", "client auth"],
    }
    if ips:
        body["ipAddresses"] = ips
    return {
        "apiVersion": CERT_MANAGER_API,
        "kind": "Certificate",
        "metadata": common.metadata(owner, subject.component, name=subject.secret),
        "spec": body,
    }


# --- what the pods mount -------------------------------------------------------------------
def tls_volume(owner: Owner, component: str, *, volume: str = "tls") -> Json:
    return {
        "name": volume,
        "secret": {"secretName": tls_secret_name(owner, component), "defaultMode": SECRET_MODE},
    }


def auth_volume(owner: Owner, spec: ClusterSpec, *, verify_key: str, token: str) -> Json:
    """The signing Secret's verification key (never a private key) and one token."""
    return {
        "name": "auth",
        "projected": {
            "defaultMode": SECRET_MODE,
            "sources": [
                {
                    "secret": {
                        "name": signing_secret_name(owner, spec),
                        "items": [{"key": verify_key, "path": verify_key}],
                    }
                },
                {
                    "secret": {
                        "name": tokens_secret_name(owner),
                        "items": [{"key": token, "path": token}],
                    }
                },
            ],
        },
    }


def etcd_client_settings(tls_dir: str) -> str:
    """Pulsar's etcd settings file (``metadataStoreConfigPath``): TLS with the component's
    own certificate as the client certificate."""
    return (
        "useTls: true\n"
        f"tlsTrustCertsFilePath: {tls_dir}/{CA_CERT}\n"
        f"tlsCertificateFilePath: {tls_dir}/{TLS_CERT}\n"
        f"tlsKeyFilePath: {tls_dir}/{TLS_KEY}\n"
    )


def token_authentication(*, auth_dir: str, verify_key: str, token: str) -> dict[str, str]:
    """Keys a broker and a proxy share for ``spec.auth``: clients authenticate with tokens
    verified with the mounted key; the process's own ``token`` towards the brokers."""
    key_kind = "tokenSecretKey" if verify_key.startswith("secret") else "tokenPublicKey"
    return {
        "authenticationEnabled": "true",
        "authenticationProviders": TOKEN_PROVIDER,
        key_kind: f"file://{auth_dir}/{verify_key}",
        "brokerClientAuthenticationPlugin": TOKEN_CLIENT_PLUGIN,
        "brokerClientAuthenticationParameters": f"file://{auth_dir}/{token}",
    }


def auth_config(spec: ClusterSpec, *, auth_dir: str, verify_key: str) -> dict[str, str]:
    """broker.conf keys of ``spec.auth``: token authentication, authorization, the
    super-users (the operator's, the brokers' and the proxy's roles first), the proxy's role
    as ``proxyRoles`` when there is a proxy, and the brokers' own token for calls to other
    brokers."""
    roles = [OPERATOR_ROLE, BROKER_ROLE]
    if spec.proxy.enabled:
        roles.append(PROXY_ROLE)
    data = {
        **token_authentication(auth_dir=auth_dir, verify_key=verify_key, token=BROKER_TOKEN),
        "authorizationEnabled": "true",
        "superUserRoles": ",".join(dict.fromkeys([*roles, *spec.auth.super_user_roles])),
    }
    if spec.proxy.enabled:
        data["proxyRoles"] = PROXY_ROLE
    return data


def minted_tokens(spec: ClusterSpec) -> list[tuple[str, str]]:
    """(item in ``<cluster>-tokens``, role) of every token the operator mints."""
    out = [(OPERATOR_TOKEN, OPERATOR_ROLE), (BROKER_TOKEN, BROKER_ROLE)]
    if spec.proxy.enabled:
        out.append((PROXY_TOKEN, PROXY_ROLE))
    return out
