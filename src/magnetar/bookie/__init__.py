"""The bookie: durable storage of ledger entries (journal + entry logs + index) behind gRPC.

A bookie knows nothing of topics (docs/architecture.md). ``storage`` is the local engine,
the gRPC service sits on top of :class:`magnetar.bookie.storage.api.LedgerStorage`.
"""
