"""Managed ledgers: a topic's log as an ordered list of ledgers, and its cursors.

DESIGN.md §4. The broker programs against :mod:`magnetar.managed_ledger.api`.
"""
