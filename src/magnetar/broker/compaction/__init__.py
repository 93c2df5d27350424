"""Topic compaction (Pulsar's): the latest value per key, kept in a ledger of its own.

* :mod:`.format` -- what a compacted ledger's entries are (Pulsar's RawMessage layout) and
  how one stored entry is looked into (keys, tombstones, batches re-built);
* :mod:`.view` -- :class:`CompactedTopic`, a topic's current compacted ledger and horizon,
  found again from the ``__compaction`` cursor when the topic loads;
* :mod:`.compactor` -- the two-phase compactor writing a new compacted ledger;
* :mod:`.cursor` -- the cursor of a ``read_compacted`` subscription: the compacted ledger up
  to the horizon, then the topic after it;
* :mod:`.service` -- one compaction at a time per topic, its status (admin) and the
  ``compactionThreshold`` check.
"""
