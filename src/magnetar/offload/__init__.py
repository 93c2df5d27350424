"""Tiered storage: closed ledgers copied to S3 (or any S3-compatible store) and read back.

Why a layer of its own: offloading only needs a closed ledger's entries (through the
:class:`offloader.ReadableLedger` protocol a ledger-client read handle satisfies) and an
S3 bucket; the managed ledger decides *when* to offload and records *what* was offloaded
(:meth:`offloader.OffloadResult.to_record`). Start from :class:`offloader.Offloader`;
the object layout is in :mod:`magnetar.offload.layout`, the configuration in
:mod:`magnetar.offload.config`, and docs/offload.md says what is wired into topics so far.
"""
