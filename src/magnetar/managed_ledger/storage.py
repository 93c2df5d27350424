"""What the managed-ledger implementation shares between its parts: its knobs and how a
storage failure surfaces.

Why this module exists: the ledger (:mod:`magnetar.managed_ledger.ledger`), its writer, its
reader and its cursors each meet the ledger client and the metadata store; they must turn
their failures into the same managed-ledger errors, and none of them may import another
just for that.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.ledger import errors as ledger_errors
from magnetar.managed_ledger import api
from magnetar.metadata import api as md


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """Implementation knobs (not part of the per-topic config)."""

    trim_interval_s: float = 5.0
    cursor_ledger_max_entries: int = 10_000
    """A durable cursor starts a new cursor ledger after this many state entries."""


def storage_error(err: BaseException) -> api.ManagedLedgerError:
    """The managed-ledger error a lower-layer failure surfaces as."""
    if isinstance(err, api.ManagedLedgerError):
        return err
    if isinstance(err, ledger_errors.LedgerFencedError | md.BadVersionError):
        return api.ManagedLedgerFencedError(str(err))
    return api.StorageUnavailableError(f"{type(err).__name__}: {err}")
