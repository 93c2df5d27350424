"""Namespace bundles as Apache Pulsar computes them (issue 26): a topic belongs to the bundle
whose range holds the CRC32 of its full name, and ``topics bundle-range`` answers that range.

The expected ranges are computed here from Pulsar's algorithm, written out independently of
Magnetar's code: the namespace's boundaries split 2^32 into equal segments with 0xffffffff
as the last one (NamespacesBase.getBundles), a topic's hash is Guava's ``Hashing.crc32()``
of its UTF-8 name, unsigned (NamespaceBundleFactory.getLongHashCode; a partition hashes by
its own name), and a range is closed below and open above except the last. Against every
Magnetar target of the client suites (standalone, two-broker cluster, secured), and with
``make test-clients-pulsar`` against Apache Pulsar itself, so the same expectations hold for
both.
"""

from __future__ import annotations

import itertools
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zlib

import pytest

from tests.clients.conftest import Target

BUNDLES = 16
NAMES = [
    "persistent://{ns}/orders",
    "persistent://{ns}/payments",
    "persistent://{ns}/a",
    "persistent://{ns}/topic-with-a-long-name-0123456789",
    "persistent://{ns}/t-partition-0",
    "persistent://{ns}/t-partition-1",
    "persistent://{ns}/t-partition-7",
    "persistent://{ns}/ünïcödé",
    "non-persistent://{ns}/events",
    # 73 names over 16 bundles: whatever the (random) namespace, more than 8 bundles get one
    # (with 25 names, about 3 namespaces in 10,000 hit 8 or fewer: a fresh-clone run did)
    *(f"persistent://{{ns}}/load-{i}" for i in range(64)),
]


def pulsar_boundaries(n: int) -> list[int]:
    seg = (1 << 32) // n
    return [i * seg for i in range(n)] + [(1 << 32) - 1]


def pulsar_bundle_range(full_name: str, n: int) -> str:
    h = zlib.crc32(full_name.encode("utf-8")) & 0xFFFFFFFF
    b = pulsar_boundaries(n)
    for lower, upper in itertools.pairwise(b):
        if lower <= h < upper or (upper == b[-1] and h == upper):
            return f"0x{lower:08x}_0x{upper:08x}"
    raise AssertionError(h)


def _request(target: Target, method: str, path: str, body: bytes | None = None) -> bytes:
    """The answer's body; a 307 to the owning broker is followed with the same method."""
    url = target.admin_url + path
    for _ in range(3):
        try:
            return _once(target, method, url, body)
        except urllib.error.HTTPError as err:
            if err.code not in (307, 308):
                raise
            url = urllib.parse.urljoin(url, err.headers["Location"])
    raise AssertionError(f"{method} {path}: too many redirects")


def _once(target: Target, method: str, url: str, body: bytes | None) -> bytes:
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if target.auth_token:
        req.add_header("Authorization", f"Bearer {target.auth_token}")
    ctx = (
        ssl.create_default_context(cafile=str(target.tls_trust_certs))
        if target.tls_trust_certs
        else None
    )
    with urllib.request.urlopen(req, timeout=30, context=ctx) as answer:
        return bytes(answer.read())


def test_the_algorithm_written_here_is_crc32_over_equal_segments() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926  # CRC-32's check value, Guava's crc32 too
    assert pulsar_boundaries(4) == [0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    assert pulsar_bundle_range("x", 1) == "0x00000000_0xffffffff"


def test_each_topic_is_in_pulsars_bundle(client_target: Target) -> None:
    ns = f"public/bundles-{uuid.uuid4().hex[:8]}"
    policies = json.dumps({"bundles": {"numBundles": BUNDLES}}).encode()
    _request(client_target, "PUT", f"/admin/v2/namespaces/{ns}", policies)
    listed = json.loads(_request(client_target, "GET", f"/admin/v2/namespaces/{ns}/bundles"))
    assert listed["boundaries"] == [f"0x{b:08x}" for b in pulsar_boundaries(BUNDLES)]
    seen = set()
    for pattern in NAMES:
        name = pattern.format(ns=ns)
        domain, _, rest = name.partition("://")
        path = f"/lookup/v2/topic/{domain}/{urllib.parse.quote(rest)}/bundle"
        try:
            got = _request(client_target, "GET", path).decode()
        except urllib.error.HTTPError as err:
            pytest.fail(f"{name}: HTTP {err.code} {err.read()[:200]!r}")
        assert got == pulsar_bundle_range(name, BUNDLES), name
        seen.add(got)
    assert len(seen) > 8  # the names spread over the bundles: the test tells hashes apart


def test_a_split_in_the_middle_gives_pulsars_boundaries(client_target: Target) -> None:
    """``namespaces split-bundle`` with the default algorithm (range_equally_divide) on a
    one-bundle namespace: the same new boundaries as Pulsar's NamespaceBundleFactory."""
    ns = f"public/split-{uuid.uuid4().hex[:8]}"
    _request(client_target, "PUT", f"/admin/v2/namespaces/{ns}", b'{"bundles": {"numBundles": 1}}')
    # a lookup places the bundle on a broker (Pulsar splits only an owned bundle)
    _request(client_target, "GET", f"/lookup/v2/topic/persistent/{ns}/x")
    _request(client_target, "PUT", f"/admin/v2/namespaces/{ns}/0x00000000_0xffffffff/split")
    listed = json.loads(_request(client_target, "GET", f"/admin/v2/namespaces/{ns}/bundles"))
    assert listed["boundaries"] == ["0x00000000", "0x7fffffff", "0xffffffff"]
    assert listed["numBundles"] == 2
