"""Where every piece of metadata lives: pure functions building store keys.

Why this module exists: brokers, bookies and the operator must agree on one key layout
(documented in docs/metadata.md). Building keys in one place keeps that agreement
checkable, and keeps name encoding (which characters are escaped) consistent.

Names coming from users (tenants, namespaces, topics, subscriptions) are percent-encoded
into a single key segment, so a ``/`` or ``%`` inside a name can never create or merge
segments. Ledger ids and schema versions are zero-padded to 20 digits (the width of the
largest unsigned 64-bit number) so that key order is numeric order.
"""

from __future__ import annotations

import urllib.parse
from typing import Literal

Domain = Literal["persistent", "non-persistent"]
DOMAINS: tuple[Domain, ...] = ("persistent", "non-persistent")

_SAFE = ":@=+,-._~"
"""Characters kept as they are in a segment (readable ``host:port``); all else is escaped."""

_ID_WIDTH = 20
_MAX_ID = 2**64 - 1

# Top-level prefixes (children and scans start here).
ADMIN = "/admin"
CLUSTERS = "/admin/clusters"
POLICIES = "/admin/policies"
DYNAMIC_CONFIG = "/admin/configuration"
PARTITIONED_TOPICS = "/admin/partitioned-topics"
TOPIC_POLICIES = "/admin/topic-policies"
RESOURCE_QUOTAS = "/admin/resource-quotas"
DEFAULT_RESOURCE_QUOTA = "/admin/resource-quota-default"
MANAGED_LEDGERS = "/managed-ledgers"
LEDGERS = "/ledgers"
BOOKIES = "/bookies"
BOOKIES_AVAILABLE = "/bookies/available"
BOOKIES_READONLY = "/bookies/readonly"
BOOKIE_COOKIES = "/bookies/cookies"
BOOKIE_INSTANCE_ID = "/bookies/instance-id"
BOOKIE_STATES = "/bookies/state"
BOOKIE_RACKS_INFO = "/bookies/racks-info"
"""Pulsar's BookiesRackConfiguration (``{group: {bookie: {rack, hostname}}}``), one record
set through the admin API (``/admin/v2/bookies/racks-info``); it overrides the rack a bookie
registered with (magnetar.ledger.racks)."""
UNDERREPLICATION = "/underreplication"
UNDERREPLICATED_LEDGERS = "/underreplication/ledgers"
UNDERREPLICATION_LOCKS = "/underreplication/locks"
AUDITOR = "/underreplication/auditor"
"""The elected auditor's key (leased by its session: whoever created it is the auditor)."""
BROKERS = "/loadbalance/brokers"
BROKER_LOAD = "/loadbalance/load"
OWNERSHIP = "/namespace"
SCHEMAS = "/schemas"
COUNTERS = "/counters"

LEDGER_COUNTER = "ledger"
"""Name of the id counter handing out ledger ids (data and cursor ledgers alike)."""

DEDUP_CURSOR = "pulsar.dedup"
"""The cursor whose ledger holds a topic's deduplication snapshots (as in Pulsar)."""

REPLICATOR_CURSOR_PREFIX = "pulsar.repl."
"""A replicator's cursor is ``pulsar.repl.<remote cluster>`` (as in Pulsar): what the topic
still has to copy to that cluster (docs/geo-replication.md)."""

COMPACTION_CURSOR = "__compaction"
"""The cursor whose mark-delete position is a topic's compaction horizon and whose
``CompactedTopicLedger`` property names its compacted ledger (Pulsar's name)."""

TXN_BUFFER_CURSOR = "pulsar.txn-buffer"
"""The cursor of a topic's transaction buffer snapshot (aborted transactions, where the
replay after a restart starts)."""

TRANSACTIONS = "/transactions"


def segment(name: str) -> str:
    """One key segment holding ``name``, percent-encoded; raises ValueError when empty."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a key segment must be a non-empty string, got {name!r}")
    return urllib.parse.quote(name, safe=_SAFE)


def unsegment(encoded: str) -> str:
    """The name a segment was built from (inverse of :func:`segment`)."""
    return urllib.parse.unquote(encoded)


def _domain(domain: str) -> str:
    if domain not in DOMAINS:
        raise ValueError(f"topic domain must be one of {DOMAINS}, got {domain!r}")
    return domain


def _id(kind: str, value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_ID:
        raise ValueError(f"{kind} must be an unsigned 64-bit integer, got {value!r}")
    return f"{value:0{_ID_WIDTH}d}"


# --- cluster, tenants, namespaces ------------------------------------------------------------


def cluster(name: str) -> str:
    """Cluster data (service URLs) of cluster ``name``."""
    return f"{CLUSTERS}/{segment(name)}"


def tenant(name: str) -> str:
    """Tenant info (admin roles, allowed clusters)."""
    return f"{POLICIES}/{segment(name)}"


def namespace(tenant_name: str, namespace_name: str) -> str:
    """Namespace policies (bundles, retention, backlog quotas, TTL, dedup, ...)."""
    return f"{tenant(tenant_name)}/{segment(namespace_name)}"


def partitioned_topic(tenant_name: str, namespace_name: str, domain: Domain, topic: str) -> str:
    """Partitioned-topic metadata (number of partitions) of a topic's base name."""
    return (
        f"{PARTITIONED_TOPICS}/{segment(tenant_name)}/{segment(namespace_name)}"
        f"/{_domain(domain)}/{segment(topic)}"
    )


def topic_policies(tenant_name: str, namespace_name: str, domain: Domain, topic: str) -> str:
    """Topic-level policies (message TTL, retention, deduplication) of a topic's base name;
    they override the namespace's."""
    return (
        f"{TOPIC_POLICIES}/{segment(tenant_name)}/{segment(namespace_name)}"
        f"/{_domain(domain)}/{segment(topic)}"
    )


def resource_quota(tenant_name: str, namespace_name: str, bundle: str) -> str:
    """The resource quota of one bundle (``0x..._0x...``) of a namespace."""
    return f"{RESOURCE_QUOTAS}/{segment(tenant_name)}/{segment(namespace_name)}/{bundle}"


# --- managed ledgers and cursors -------------------------------------------------------------


def managed_ledger(tenant_name: str, namespace_name: str, domain: Domain, topic: str) -> str:
    """A topic's (or partition's) managed-ledger info: its list of ledgers."""
    return (
        f"{MANAGED_LEDGERS}/{segment(tenant_name)}/{segment(namespace_name)}"
        f"/{_domain(domain)}/{segment(topic)}"
    )


def cursors(tenant_name: str, namespace_name: str, domain: Domain, topic: str) -> str:
    """Parent of a managed ledger's cursors (``children`` lists the cursor names)."""
    return f"{managed_ledger(tenant_name, namespace_name, domain, topic)}/cursors"


def cursor(tenant_name: str, namespace_name: str, domain: Domain, topic: str, name: str) -> str:
    """Cursor pointer: the cursor ledger id and the last persisted mark-delete position."""
    return f"{cursors(tenant_name, namespace_name, domain, topic)}/{segment(name)}"


def dedup_cursor(tenant_name: str, namespace_name: str, domain: Domain, topic: str) -> str:
    """Pointer to a topic's deduplication snapshot (the ``pulsar.dedup`` cursor)."""
    return cursor(tenant_name, namespace_name, domain, topic, DEDUP_CURSOR)


def pending_ack(topic: str, subscription: str, txn: str) -> str:
    """A subscription's acknowledgements held by a transaction (``txn``: ``most:least``)."""
    return f"{pending_acks(topic)}/{segment(subscription)}/{segment(txn)}"


def pending_acks(topic: str) -> str:
    """Every pending-ack record of a topic (full topic name)."""
    return f"{TRANSACTIONS}/pending-acks/{segment(topic)}"


# --- ledgers and bookies ---------------------------------------------------------------------


def ledger(ledger_id: int) -> str:
    """Ledger metadata: ensembles per fragment, E/Wq/Aq, state, last entry at close."""
    return f"{LEDGERS}/{_id('ledger id', ledger_id)}"


def ledger_id_of(key: str) -> int:
    """The ledger id in a key built by :func:`ledger`."""
    head, _, tail = key.rpartition("/")
    if head != LEDGERS or len(tail) != _ID_WIDTH or not tail.isdigit():
        raise ValueError(f"not a ledger key: {key!r}")
    return int(tail)


def bookie_available(bookie_id: str) -> str:
    """A writable bookie's registration (leased by the bookie's session)."""
    return f"{BOOKIES_AVAILABLE}/{segment(bookie_id)}"


def bookie_readonly(bookie_id: str) -> str:
    """A read-only bookie's registration (leased)."""
    return f"{BOOKIES_READONLY}/{segment(bookie_id)}"


def bookie_cookie(bookie_id: str) -> str:
    """A bookie's cookie: ties its identity to its directories (persistent, CAS-updated)."""
    return f"{BOOKIE_COOKIES}/{segment(bookie_id)}"


def bookie_state(bookie_id: str) -> str:
    """An operator-set bookie state (``decommissioning``, ``decommissioned``) with the
    instance id it applies to (persistent)."""
    return f"{BOOKIE_STATES}/{segment(bookie_id)}"


def underreplicated_ledger(ledger_id: int) -> str:
    """The auditor's mark on a ledger that lost a replica (persistent until recovered)."""
    return f"{UNDERREPLICATED_LEDGERS}/{_id('ledger id', ledger_id)}"


def underreplication_lock(ledger_id: int) -> str:
    """The claim of the recovery worker re-replicating a ledger (leased by its session)."""
    return f"{UNDERREPLICATION_LOCKS}/{_id('ledger id', ledger_id)}"


def id_in_key(key: str) -> int:
    """The 20-digit id ending a key (ledger, under-replication mark or lock)."""
    tail = key.rpartition("/")[2]
    if len(tail) != _ID_WIDTH or not tail.isdigit():
        raise ValueError(f"no id at the end of key {key!r}")
    return int(tail)


# --- brokers and ownership -------------------------------------------------------------------


def broker(broker_id: str) -> str:
    """A live broker's registration and lookup data (leased)."""
    return f"{BROKERS}/{segment(broker_id)}"


def broker_load(broker_id: str) -> str:
    """A live broker's latest load report (leased, rewritten periodically)."""
    return f"{BROKER_LOAD}/{segment(broker_id)}"


def bundle_owner(tenant_name: str, namespace_name: str, bundle_range: str) -> str:
    """Ownership of a namespace bundle (``0x00000000_0x40000000``), leased by its broker.

    Topics are owned through the bundle their name hashes into.
    """
    return f"{OWNERSHIP}/{segment(tenant_name)}/{segment(namespace_name)}/{segment(bundle_range)}"


# --- schemas and counters --------------------------------------------------------------------


def schemas(tenant_name: str, namespace_name: str, topic: str) -> str:
    """Parent of a topic's schema versions (one history per topic base name)."""
    return f"{SCHEMAS}/{segment(tenant_name)}/{segment(namespace_name)}/{segment(topic)}"


def schema_version(tenant_name: str, namespace_name: str, topic: str, version: int) -> str:
    """Schema version ``version`` of a topic (created once, never rewritten)."""
    return f"{schemas(tenant_name, namespace_name, topic)}/{_id('schema version', version)}"


def id_counter(name: str) -> str:
    """The counter behind ``MetadataStore.next_id(name)``."""
    return f"{COUNTERS}/{segment(name)}"


# --- Pulsar Functions (magnetar.functions) ----------------------------------------------------

FUNCTIONS = "/functions/meta"
FUNCTION_PACKAGES = "/functions/packages"
FUNCTION_STATE = "/functions/state"


def function(tenant_name: str, namespace_name: str, name: str) -> str:
    """A function's record: its FunctionConfig, package and which instances are stopped."""
    return f"{FUNCTIONS}/{segment(tenant_name)}/{segment(namespace_name)}/{segment(name)}"


def function_namespace(tenant_name: str, namespace_name: str) -> str:
    """Parent of a namespace's function records (their children are the names)."""
    return f"{FUNCTIONS}/{segment(tenant_name)}/{segment(namespace_name)}"


def function_packages(tenant_name: str, namespace_name: str, name: str) -> str:
    """Parent of every stored package version of a function."""
    return f"{FUNCTION_PACKAGES}/{segment(tenant_name)}/{segment(namespace_name)}/{segment(name)}"


def function_package_chunk(
    tenant_name: str, namespace_name: str, name: str, version: int, chunk: int
) -> str:
    """Chunk ``chunk`` of package version ``version`` (values are at most 1 MiB)."""
    base = function_packages(tenant_name, namespace_name, name)
    return f"{base}/{_id('package version', version)}/{_id('chunk', chunk)}"


def function_state(tenant_name: str, namespace_name: str, name: str) -> str:
    """Parent of a function's state keys (``put_state``, counters)."""
    return f"{FUNCTION_STATE}/{segment(tenant_name)}/{segment(namespace_name)}/{segment(name)}"


def function_state_key(tenant_name: str, namespace_name: str, name: str, key: str) -> str:
    """One state key of a function."""
    return f"{function_state(tenant_name, namespace_name, name)}/{segment(key)}"
