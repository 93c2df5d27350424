"""Pulsar transactions: the coordinator, the per-topic transaction buffer and the
per-subscription pending acknowledgements.

Why this package exists: transactions cut across the broker (connection commands, the
publish path, dispatch, acknowledgements) but their state and rules are their own; the rest
of the broker reaches them through a few small hooks (``Topic.append_txn``, the dispatch
filter of ``subscriptions.subscription``, the transactional branch of ACK). The pieces:

* :mod:`.coordinator` -- one transaction coordinator per partition of
  ``persistent://pulsar/system/transaction_coordinator_assign``: transaction ids, states,
  timeouts, its log in a managed ledger (recovered on load);
* :mod:`.buffer` -- a topic's transaction buffer: transactional entries stored at once but
  held back from consumers (max read position) until their commit marker; aborted ones
  never delivered;
* :mod:`.pending_acks` -- transactional acknowledgements held until commit (applied) or
  abort (redelivered) and withheld from other consumers meanwhile, kept in the metadata
  store;
* :mod:`.service` -- the broker's transaction service tying them to topics;
* :mod:`.remote` -- END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION to another broker;
* :mod:`.session` -- the connection's transaction commands.
"""
