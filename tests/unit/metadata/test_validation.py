"""Bad input to the metadata store gets the specific documented exception, before anything
is sent or written; URL mistakes name the problem. Store-level cases run on both backends."""

from __future__ import annotations

import pytest

from magnetar.metadata import api, open_store

BAD_KEYS = [
    ("", api.InvalidKeyError),
    ("relative/key", api.InvalidKeyError),
    ("/trailing/", api.InvalidKeyError),
    ("/empty//segment", api.InvalidKeyError),
    ("//", api.InvalidKeyError),
    ("/nul\x00inside", api.InvalidKeyError),
    ("/" + "k" * api.MAX_KEY_BYTES, api.KeyTooLargeError),
    ("/" + "\u00e9" * (api.MAX_KEY_BYTES // 2), api.KeyTooLargeError),  # counted in bytes
]


@pytest.mark.parametrize(("key", "error"), BAD_KEYS)
def test_check_key_rejects(key: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        api.check_key(key)


def test_error_families() -> None:
    """Callers may catch by reaction (temporary/permanent) or by Python family."""
    assert issubclass(api.InvalidKeyError, ValueError)
    assert issubclass(api.KeyTooLargeError, ValueError)
    assert issubclass(api.ValueTooLargeError, ValueError)
    assert issubclass(api.NotFoundError, KeyError)
    assert issubclass(api.StoreUnavailableError, api.errors.TemporaryError)
    for permanent in (api.BadVersionError, api.SessionLostError, api.WatchCompactedError):
        assert issubclass(permanent, api.errors.PermanentError)


@pytest.mark.parametrize(
    "key", ["/", "/a", "/a/b-c/d.e", "/\u00e9t\u00e9", "/" + "k" * (api.MAX_KEY_BYTES - 1)]
)
def test_check_key_accepts(key: str) -> None:
    assert api.check_key(key) == key.encode()


def test_check_value() -> None:
    api.check_value("/k", b"x" * api.MAX_VALUE_BYTES)
    with pytest.raises(api.ValueTooLargeError):
        api.check_value("/k", b"x" * (api.MAX_VALUE_BYTES + 1))
    with pytest.raises(TypeError):
        api.check_value("/k", "text")  # type: ignore[arg-type]


def test_check_prefix() -> None:
    assert api.check_prefix("/") == "/"
    assert api.check_prefix("/a/b") == "/a/b/"
    with pytest.raises(api.InvalidKeyError):
        api.check_prefix("/a/")


def test_check_txn() -> None:
    api.check_txn([api.Compare("/a", api.NOT_EXISTS)], [api.Put("/a", b"")], [api.Delete("/a")])
    with pytest.raises(api.InvalidTxnError, match="twice"):
        api.check_txn([], [api.Put("/a", b"1"), api.Put("/a", b"2")], [])
    with pytest.raises(api.InvalidTxnError, match="limit"):
        api.check_txn([api.Compare(f"/{i}", api.NOT_EXISTS) for i in range(129)], [], [])
    with pytest.raises(api.InvalidKeyError):
        api.check_txn([api.Compare("bad", api.NOT_EXISTS)], [], [])
    with pytest.raises(api.ValueTooLargeError):
        api.check_txn([], [], [api.Put("/a", b"x" * (api.MAX_VALUE_BYTES + 1))])


# --- through a store (both backends) ----------------------------------------------------------


@pytest.mark.parametrize(("key", "error"), BAD_KEYS)
async def test_store_rejects_bad_keys(
    metadata_store: api.MetadataStore, key: str, error: type[Exception]
) -> None:
    store = metadata_store
    before = await store.revision()
    with pytest.raises(error):
        await store.put(key, b"v")
    with pytest.raises(error):
        await store.get(key)
    with pytest.raises(error):
        await store.delete(key)
    with pytest.raises(error):
        await store.txn([], [api.Put(key, b"v")])
    with pytest.raises(error):
        store.watch(key)
    assert await store.revision() == before  # nothing was written
    assert (await store.scan("/")).records == []


async def test_store_rejects_bad_prefixes_values_and_limits(
    metadata_store: api.MetadataStore,
) -> None:
    store = metadata_store
    before = await store.revision()
    with pytest.raises(api.ValueTooLargeError):
        await store.put("/big", b"x" * (api.MAX_VALUE_BYTES + 1))
    for call in (
        lambda: store.scan("/p/"),
        lambda: store.children("p"),
        lambda: store.delete_prefix("/p//q"),
    ):
        with pytest.raises(api.InvalidKeyError):
            await call()
    with pytest.raises(ValueError, match="limit"):
        await store.scan("/p", limit=0)
    with pytest.raises(ValueError, match="ttl"):
        await store.session(0)
    with pytest.raises(ValueError, match="start_revision"):
        store.watch("/p", start_revision=0)
    assert await store.revision() == before
    # The largest value is accepted and read back whole.
    big = bytes(range(256)) * (api.MAX_VALUE_BYTES // 256)
    await store.put("/big", big)
    record = await store.get("/big")
    assert record is not None and record.value == big


async def test_store_version_mismatch_errors(metadata_store: api.MetadataStore) -> None:
    store = metadata_store
    v1 = await store.put("/v", b"1")
    v2 = await store.put("/v", b"2")
    with pytest.raises(api.BadVersionError) as caught:
        await store.put("/v", b"3", expected_version=v1)
    assert (caught.value.key, caught.value.expected, caught.value.actual) == ("/v", v1, v2)
    with pytest.raises(api.BadVersionError):
        await store.put("/v", b"3", expected_version=api.NOT_EXISTS)
    with pytest.raises(api.BadVersionError):
        await store.delete("/v", expected_version=v1)
    with pytest.raises(api.NotFoundError):
        await store.delete("/absent")
    record = await store.get("/v")
    assert record is not None and (record.value, record.version) == (b"2", v2)


# --- URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "expected"),
        ("/just/a/path", "expected"),
        ("zookeeper://host:2181", "unknown scheme"),
        ("etcd:host:2379", "etcd://"),
        ("etcd://", "no etcd endpoint"),
        ("etcd://host", "host:port"),
        ("etcd://host:notaport", "bad port"),
        ("etcd://host:70000", "bad port"),
        ("etcd://a:1,:2", "host:port"),
        ("etcd://host:2379/path", "no path"),
        ("etcd://host:2379?timeout=-1", "positive"),
        ("etcd://host:2379?timeout=soon", "not a number"),
        ("etcd://host:2379?color=red", "unknown parameter"),
        ("embedded:", "no directory"),
        ("embedded:///", "no directory"),
        ("embedded://host/dir", "no host"),
        ("embedded:///tmp/x?history=0", "positive"),
    ],
)
async def test_open_store_bad_urls(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        await open_store(url)
