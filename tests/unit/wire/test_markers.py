"""Replicated-subscription markers as stored entries (wire/markers.py): the wire facts (marker
types, field numbers), where each kind is replicated to, and reading them back."""

from __future__ import annotations

from magnetar.broker.subscriptions.entries import split_entry
from magnetar.wire import frames, markers, pb
from magnetar.wire.markers import markers_pb


def _response() -> bytes:
    return markers.snapshot_response("id1", reply_to="a", cluster="b", position=(3, 4))


def _split(entry: bytes) -> tuple[pb.MessageMetadata, bytes]:
    raw_meta, payload = split_entry(entry)
    return frames.parse_message_metadata(raw_meta), bytes(payload)


def test_marker_types_and_field_numbers_are_pulsars() -> None:
    assert (markers.SNAPSHOT_REQUEST, markers.SNAPSHOT_RESPONSE) == (10, 11)
    assert (markers.SNAPSHOT, markers.UPDATE) == (12, 13)
    assert (markers_pb.TXN_COMMIT, markers_pb.TXN_ABORT) == (21, 22)
    fields = markers_pb.ReplicatedSubscriptionsSnapshot.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in fields.items()} == {
        "snapshot_id": 1,
        "local_message_id": 2,
        "clusters": 3,
    }
    # a request as a Pulsar broker writes it: snapshot_id (1) then source_cluster (2)
    request = markers_pb.ReplicatedSubscriptionsSnapshotRequest(snapshot_id="s", source_cluster="a")
    assert request.SerializeToString() == b"\x0a\x01s\x12\x01a"


def test_each_kind_goes_where_pulsar_sends_it() -> None:
    request, _ = _split(markers.snapshot_request("id1", "a"))
    assert request.marker_type == markers.SNAPSHOT_REQUEST and not request.replicate_to
    assert request.producer_name == markers.PRODUCER
    response, _ = _split(
        markers.snapshot_response("id1", reply_to="a", cluster="b", position=(3, 4))
    )
    assert list(response.replicate_to) == ["a"]  # to the asking cluster only
    snapshot, _ = _split(
        markers.snapshot("id1", local_cluster="a", local=(5, 6), ids={"b": (3, 4)})
    )
    assert list(snapshot.replicate_to) == ["a"]  # kept where it was taken
    update, _ = _split(markers.update("sub", {"b": (3, 4)}))
    assert not update.replicate_to  # to every cluster


def test_markers_read_back() -> None:
    _, payload = _split(markers.snapshot_request("id1", "a"))
    assert markers.parse_request(payload) == ("id1", "a")
    _, payload = _split(
        markers.snapshot_response("id1", reply_to="a", cluster="b", position=(3, 4))
    )
    assert markers.parse_response(payload) == ("id1", "b", (3, 4))
    ids = {"b": (3, 4), "c": (7, 8)}
    _, payload = _split(markers.snapshot("id1", local_cluster="a", local=(5, 6), ids=ids))
    assert markers.parse_snapshot(payload) == ("id1", (5, 6), ids)
    _, payload = _split(markers.update("sub", ids))
    assert markers.parse_update(payload) == ("sub", ids)


def test_the_metadata_tag_tells_markers_apart() -> None:
    raw_meta, _ = split_entry(markers.update("sub", {}))
    assert markers.METADATA_TAG in bytes(raw_meta)
    plain = frames.encode_headers_and_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1), b"x"
    )
    assert markers.METADATA_TAG not in bytes(split_entry(plain)[0])
