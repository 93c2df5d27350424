"""Managed ledgers: a topic's log as an ordered list of ledgers, and its cursors.

DESIGN.md §4. The broker programs against :mod:`magnetar.managed_ledger.api`; the
implementation is :class:`factory.ManagedLedgerFactoryImpl` (open managed ledgers with it),
built from :mod:`ledger` (the log), :mod:`cursor` (positions and acknowledgements),
:mod:`acks` (the pure acknowledgement state), :mod:`cache` (tail entries in memory) and
:mod:`records` (what is stored in the metadata store).
"""
