"""Pulsar's replicated-subscription markers as stored entries: built and read, no I/O.

Why this module exists: the brokers of a replicated topic's clusters talk to each other
through entries of the topic itself (Pulsar's ``Markers``): a snapshot request travels to the
other clusters with the replicated messages, each answers with a response replicated back to
the asking cluster only, the asking cluster stores the completed snapshot locally, and a
subscription's update travels to every cluster. Each is an entry whose metadata has
``marker_type`` (``markers_pb.MarkerType``), producer ``pulsar.marker`` and, where Pulsar
restricts it, ``replicate_to``; the payload is the marker message (proto/wire/
PulsarMarkers.proto). docs/geo-replication.md, "Replicated subscriptions", says how they are
used.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Final

from magnetar.wire import frames, pb
from magnetar.wire._gen import PulsarMarkers_pb2 as markers_pb

__all__ = ["markers_pb"]

PRODUCER: Final = "pulsar.marker"
"""The producer name of marker entries (Pulsar's)."""
SNAPSHOT_REQUEST: Final = markers_pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST
SNAPSHOT_RESPONSE: Final = markers_pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE
SNAPSHOT: Final = markers_pb.REPLICATED_SUBSCRIPTION_SNAPSHOT
UPDATE: Final = markers_pb.REPLICATED_SUBSCRIPTION_UPDATE
REPLICATED_SUBSCRIPTION_MARKERS: Final = frozenset(
    {SNAPSHOT_REQUEST, SNAPSHOT_RESPONSE, SNAPSHOT, UPDATE}
)

METADATA_TAG: Final = bytes([20 << 3, 1])
"""The encoded key of MessageMetadata.marker_type (field 20, varint): metadata without these
two bytes carries no marker (metadata with them is parsed to be sure)."""

Ids = Mapping[str, tuple[int, int]]
"""Cluster -> (ledger id, entry id) of a position in that cluster's copy of the topic."""


def _entry(marker: int, message: bytes, replicate_to: Iterable[str] = ()) -> bytes:
    meta = pb.MessageMetadata(
        producer_name=PRODUCER,
        sequence_id=0,
        publish_time=int(time.time() * 1000),
        marker_type=marker,
    )
    meta.replicate_to.extend(replicate_to)
    return frames.encode_headers_and_payload(meta, message)


def _ids(message: markers_pb.MarkersMessageIdData) -> tuple[int, int]:
    return message.ledger_id, message.entry_id


def _cluster_ids(clusters: Iterable[markers_pb.ClusterMessageId]) -> dict[str, tuple[int, int]]:
    return {c.cluster: _ids(c.message_id) for c in clusters}


def _set_cluster_ids(field: object, ids: Ids) -> None:
    for cluster, (ledger_id, entry_id) in sorted(ids.items()):
        added = field.add()  # type: ignore[attr-defined]
        added.cluster = cluster
        added.message_id.ledger_id = ledger_id
        added.message_id.entry_id = entry_id


def snapshot_request(snapshot_id: str, source_cluster: str) -> bytes:
    """Asks every other cluster of the topic where it is (replicated to all)."""
    message = markers_pb.ReplicatedSubscriptionsSnapshotRequest(
        snapshot_id=snapshot_id, source_cluster=source_cluster
    )
    return _entry(SNAPSHOT_REQUEST, message.SerializeToString())


def snapshot_response(
    snapshot_id: str, *, reply_to: str, cluster: str, position: tuple[int, int]
) -> bytes:
    """``cluster``'s answer (its position of the request), replicated to ``reply_to`` only."""
    message = markers_pb.ReplicatedSubscriptionsSnapshotResponse(snapshot_id=snapshot_id)
    message.cluster.cluster = cluster
    message.cluster.message_id.ledger_id, message.cluster.message_id.entry_id = position
    return _entry(SNAPSHOT_RESPONSE, message.SerializeToString(), [reply_to])


def snapshot(snapshot_id: str, *, local_cluster: str, local: tuple[int, int], ids: Ids) -> bytes:
    """A completed snapshot, kept in the local cluster's topic (replicated to none)."""
    message = markers_pb.ReplicatedSubscriptionsSnapshot(snapshot_id=snapshot_id)
    message.local_message_id.ledger_id, message.local_message_id.entry_id = local
    _set_cluster_ids(message.clusters, ids)
    return _entry(SNAPSHOT, message.SerializeToString(), [local_cluster])


def update(subscription: str, ids: Ids) -> bytes:
    """A subscription's positions in the other clusters (replicated to all)."""
    message = markers_pb.ReplicatedSubscriptionsUpdate(subscription_name=subscription)
    _set_cluster_ids(message.clusters, ids)
    return _entry(UPDATE, message.SerializeToString())


def parse_request(payload: bytes) -> tuple[str, str]:
    """(snapshot id, source cluster)."""
    message = markers_pb.ReplicatedSubscriptionsSnapshotRequest.FromString(payload)
    return message.snapshot_id, message.source_cluster


def parse_response(payload: bytes) -> tuple[str, str, tuple[int, int]]:
    """(snapshot id, answering cluster, its position)."""
    message = markers_pb.ReplicatedSubscriptionsSnapshotResponse.FromString(payload)
    return message.snapshot_id, message.cluster.cluster, _ids(message.cluster.message_id)


def parse_snapshot(payload: bytes) -> tuple[str, tuple[int, int], dict[str, tuple[int, int]]]:
    """(snapshot id, local position, the other clusters' positions)."""
    message = markers_pb.ReplicatedSubscriptionsSnapshot.FromString(payload)
    return message.snapshot_id, _ids(message.local_message_id), _cluster_ids(message.clusters)


def parse_update(payload: bytes) -> tuple[str, dict[str, tuple[int, int]]]:
    """(subscription name, each cluster's position)."""
    message = markers_pb.ReplicatedSubscriptionsUpdate.FromString(payload)
    return message.subscription_name, _cluster_ids(message.clusters)
