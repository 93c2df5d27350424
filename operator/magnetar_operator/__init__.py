"""Magnetar's Kubernetes operator (kopf).

Turns three custom resources into a running Magnetar cluster and its contents:
``PulsarCluster`` -> etcd, bookie and broker workloads (``cluster``, ``builders``),
``Tenant``/``Topic`` -> calls on the cluster's Pulsar admin REST API (``pulsar``).
kopf handlers live in ``handlers`` and stay thin; ``kube`` is the one module that talks to
the Kubernetes API. This package imports nothing from ``magnetar`` (the data plane).
"""

__version__ = "0.1.0"
