"""The ledger client: BookKeeper's client side, inside brokers.

Ledgers are written by one writer, striped over an ensemble of E bookies with write quorum
Wq and ack quorum Aq, fenced and recovered by a new owner. Start from
:class:`client.LedgerClient`.
"""
