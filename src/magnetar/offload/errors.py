"""Errors of the offload layer, named by how the caller reacts (see magnetar.common.errors).

S3 failures are translated once, in :mod:`magnetar.offload.s3`, into these: a caller never
sees botocore's exception types, and the message always names the bucket or key and what
S3 said, so an offload status can show it to an operator as is.
"""

from __future__ import annotations

from magnetar.common import errors


class OffloadError(errors.MagnetarError):
    """Base of every offload error."""


class OffloadConfigError(OffloadError, errors.PermanentError, ValueError):
    """The offload configuration is invalid (names the setting and why)."""


class S3UnavailableError(OffloadError, errors.TemporaryError):
    """S3 could not be reached, did not answer in time, or asked to slow down: retry later."""


class S3AccessDeniedError(OffloadError, errors.PermanentError):
    """S3 refused the credentials (unknown key, bad signature, access denied) or none were
    found."""


class NoSuchBucketError(OffloadError, errors.PermanentError):
    """The configured bucket does not exist."""


class ObjectNotFoundError(OffloadError, errors.PermanentError):
    """An object the caller expected is not in the bucket."""


class S3RequestError(OffloadError, errors.PermanentError):
    """S3 refused a request for another reason (the S3 error code is in the message)."""


class OffloadVerifyError(OffloadError, errors.TemporaryError):
    """What S3 reports for an uploaded object does not match what was sent: the attempt is
    discarded and can be retried."""


class LedgerNotReadyError(OffloadError, errors.PermanentError):
    """The ledger cannot be offloaded as it is (not closed, or its entries do not add up)."""


class OffloadedDataError(OffloadError, errors.PermanentError):
    """An offloaded object is not what its index or checksum says (corrupt or foreign)."""


class NoSuchOffloadedEntryError(OffloadError, errors.PermanentError):
    """The entry asked for is not in the offloaded ledger."""
