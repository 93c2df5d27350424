"""Errors of the ledger client, named by how the caller reacts."""

from __future__ import annotations

from magnetar.common import errors


class LedgerError(errors.MagnetarError):
    """Base of ledger-client errors."""


class LedgerFencedError(LedgerError, errors.PermanentError):
    """Another client fenced the ledger (it is being recovered): this writer must stop."""


class LedgerClosedError(LedgerError, errors.PermanentError):
    """The ledger is closed: no more adds."""


class NoSuchLedgerError(LedgerError, errors.PermanentError):
    """No ledger with that id exists (in the metadata store)."""


class NoSuchEntryError(LedgerError, errors.PermanentError):
    """The entry is not stored (or not readable yet: past the last add confirmed)."""


class NotEnoughBookiesError(LedgerError, errors.TemporaryError):
    """Fewer writable bookies than the ensemble (or a replacement) needs."""


class BookieError(LedgerError, errors.TemporaryError):
    """A bookie failed a request, or could not be reached in time.

    ``code`` is the gRPC status code number the bookie answered with (14 UNAVAILABLE when
    it could not be reached, 4 DEADLINE_EXCEEDED on timeout).
    """

    def __init__(self, bookie: str, code: int, message: str) -> None:
        super().__init__(f"bookie {bookie}: code {code}: {message}")
        self.bookie = bookie
        self.code = code


class RecoveryError(LedgerError, errors.TemporaryError):
    """Recovery could not decide the ledger's end (too few bookies answered). Retry."""
