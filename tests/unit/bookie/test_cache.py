"""Write cache accounting and ordering; read cache LRU by bytes."""

from __future__ import annotations

from magnetar.bookie.storage import cache


def test_write_cache_counts_bytes_and_entries_and_overwrites_once() -> None:
    wc = cache.WriteCache()
    wc.put_many(1, [0, 1], [b"aa", b"bbb"], 5)
    wc.put_many(1, [1], [b"c"], 1)  # recovery rewrite of entry 1
    assert (wc.entries, wc.bytes) == (2, 3)
    assert wc.get(1, 1) == b"c"
    assert wc.get(2, 0) is None


def test_write_cache_sorted_items_by_ledger_then_entry_and_skip() -> None:
    wc = cache.WriteCache()
    wc.put_many(5, [3, 1], [b"x", b"y"], 2)
    wc.put_many(2, [9], [b"z"], 1)
    wc.put_many(4, [0], [b"w"], 1)
    assert list(wc.sorted_items(skip=frozenset({4}))) == [(2, 9, b"z"), (5, 1, b"y"), (5, 3, b"x")]


def test_write_cache_drop_ledger() -> None:
    wc = cache.WriteCache()
    wc.put_many(1, [0], [b"aa"], 2)
    wc.put_many(2, [0], [b"b"], 1)
    wc.drop_ledger(1)
    wc.drop_ledger(3)
    assert (wc.entries, wc.bytes) == (1, 1)


def test_read_cache_evicts_least_recently_used_by_bytes() -> None:
    rc = cache.ReadCache(max_bytes=10)
    rc.put(1, 0, b"aaaa")
    rc.put(1, 1, b"bbbb")
    assert rc.get(1, 0) == b"aaaa"  # 0 is now more recent than 1
    rc.put(1, 2, b"cccc")  # 12 bytes > 10: evict 1
    assert rc.get(1, 1) is None
    assert rc.get(1, 0) == b"aaaa"
    assert rc.bytes == 8
    assert (rc.hits, rc.misses) == (2, 1)
    rc.put(1, 3, b"x" * 11)  # larger than the cache: not kept
    assert rc.get(1, 3) is None
