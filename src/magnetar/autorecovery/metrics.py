"""Autorecovery metrics (Prometheus): whether this process is the auditor, how many ledgers
are marked under-replicated, and what re-replication copied.

Why a registry of its own: ``magnetar autorecovery`` serves it on its ``/metrics``; a bookie
running autorecovery in-process (``--autorecovery``) registers these collectors into the
bookie's registry too, so they appear on the bookie's ``/metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

REGISTRY = CollectorRegistry(auto_describe=True)

AUDITOR_ELECTED = Gauge(
    "autorecovery_auditor_elected", "1 while this process is the elected auditor", registry=REGISTRY
)
UNDER_REPLICATED = Gauge(
    "autorecovery_under_replicated_ledgers",
    "Ledgers marked under-replicated at the elected auditor's last audit",
    registry=REGISTRY,
)
RECOVERED_LEDGERS = Counter(
    "autorecovery_recovered_ledgers", "Ledgers whose mark this worker cleared", registry=REGISTRY
)
RECOVERY_ENTRIES = Counter(
    "autorecovery_rereplicated_entries",
    "Entries copied to replacement bookies (rate(): entries/s)",
    registry=REGISTRY,
)
RECOVERY_BYTES = Counter(
    "autorecovery_rereplicated_bytes",
    "Entry bytes copied to replacement bookies (rate(): bytes/s)",
    registry=REGISTRY,
)

DECOMMISSION_REMAINING = Gauge(
    "autorecovery_decommission_ledgers_remaining",
    "Ledgers still on a decommissioning bookie at the auditor's last audit",
    ["bookie"],
    registry=REGISTRY,
)

COLLECTORS = (
    AUDITOR_ELECTED,
    UNDER_REPLICATED,
    RECOVERED_LEDGERS,
    RECOVERY_ENTRIES,
    RECOVERY_BYTES,
    DECOMMISSION_REMAINING,
)
