"""Managed ledgers: a topic's log as an ordered list of ledgers, and its cursors.

The broker programs against :mod:`magnetar.managed_ledger.api`; the implementation is
:class:`factory.ManagedLedgerFactoryImpl` (open managed ledgers with it), built from
:mod:`ledger` (the log, put together from :mod:`ledger_list` -- positions, pure --,
:mod:`list_store`, :mod:`writer`, :mod:`reader` and :mod:`trimmer`), :mod:`cursor`
(positions and acknowledgements), :mod:`acks` (the pure acknowledgement state), :mod:`cache`
(tail entries in memory) and :mod:`records` (what is stored in the metadata store).
:mod:`memory` is the same contract in memory, for in-process tests of the broker core.
"""
