"""Ledgers kept beside a managed ledger's list (a compacted topic's ledger).

Why this module exists: the broker writes and reads such ledgers through the managed-ledger
contract (:class:`~magnetar.managed_ledger.api.AuxLedger`), never through the ledger client
itself; this wrapper of a :class:`~magnetar.ledger.handle.LedgerHandle` turns the ledger
client's failures into managed-ledger errors, as every other managed-ledger operation does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from magnetar.common.buffers import Payload
from magnetar.ledger import errors as ledger_errors
from magnetar.ledger.client import LedgerClient
from magnetar.ledger.handle import LedgerHandle
from magnetar.managed_ledger import api
from magnetar.managed_ledger.storage import storage_error
from magnetar.metadata import api as md


class AuxLedgerHandle:
    """One aux ledger (writer from create, reader from open)."""

    def __init__(self, handle: LedgerHandle) -> None:
        self._handle = handle

    @property
    def ledger_id(self) -> int:
        return self._handle.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    @last_add_confirmed.setter
    def last_add_confirmed(self, value: int) -> None:
        raise AttributeError("the last add confirmed of a ledger is not set from outside")

    @property
    def length(self) -> int:
        return self._handle.length

    def append(self, data: Payload) -> asyncio.Future[int]:
        return self._handle.append(data)

    async def close(self) -> None:
        try:
            await self._handle.close()
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            raise storage_error(err) from err

    async def read(self, first: int, last: int) -> list[tuple[int, Payload]]:
        try:
            return await self._handle.read(first, last)
        except (ledger_errors.LedgerError, md.MetadataError) as err:
            raise storage_error(err) from err


async def create_ledger(
    ledgers: LedgerClient, name: str, config: api.ManagedLedgerConfig, extra: Mapping[str, str]
) -> LedgerHandle:
    """A new ledger of managed ledger ``name`` (its data, a cursor's or an aux ledger), with
    the configured E/Wq/Aq and Pulsar's custom metadata plus ``extra``."""
    return await ledgers.create(
        ensemble_size=config.ensemble_size,
        write_quorum=config.write_quorum,
        ack_quorum=config.ack_quorum,
        custom={"managed-ledger": name, "application": "pulsar", **extra},
    )


async def create(
    ledgers: LedgerClient, name: str, config: api.ManagedLedgerConfig, purpose: str
) -> AuxLedgerHandle:
    """A new aux ledger of managed ledger ``name``, marked with ``purpose``."""
    try:
        return AuxLedgerHandle(await create_ledger(ledgers, name, config, {purpose: "true"}))
    except (ledger_errors.LedgerError, md.MetadataError) as err:
        raise storage_error(err) from err


async def open_(ledgers: LedgerClient, ledger_id: int) -> AuxLedgerHandle:
    """An aux ledger for reading (recovered: its writer may be gone)."""
    try:
        return AuxLedgerHandle(await ledgers.open(ledger_id, recovery=True))
    except (ledger_errors.LedgerError, md.MetadataError) as err:
        raise storage_error(err) from err


async def delete(ledgers: LedgerClient, ledger_id: int) -> None:
    try:
        await ledgers.delete(ledger_id)
    except (ledger_errors.LedgerError, md.MetadataError) as err:
        raise storage_error(err) from err


if TYPE_CHECKING:

    def _conforms(handle: AuxLedgerHandle) -> api.AuxLedger:
        return handle
