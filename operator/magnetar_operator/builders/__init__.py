"""Pure manifest builders: a ``ClusterSpec`` (plus the owner's identity) in, dicts out.

No I/O and no clock: the same input always gives the same objects, so every builder is
unit-tested without a cluster and validated offline against the Kubernetes schemas.
``build_all`` returns the cluster's objects in reconcile order.
"""

from __future__ import annotations

from magnetar_operator.builders import autorecovery, bookie, broker, etcd, monitoring, proxy
from magnetar_operator.builders.common import Owner
from magnetar_operator.spec import ClusterSpec, Json


def build_all(owner: Owner, spec: ClusterSpec) -> list[Json]:
    """Every object of a cluster, in reconcile order (metadata, bookies, autorecovery with
    ``spec.tls``, brokers, proxy, services, monitoring)."""
    return [
        *etcd.build(owner, spec),
        *bookie.build(owner, spec),
        *autorecovery.build(owner, spec),
        *broker.build_workload(owner, spec),
        *(proxy.build(owner, spec) if spec.proxy.enabled else []),
        *broker.build_services(owner, spec),
        *monitoring.build(owner, spec),
    ]
