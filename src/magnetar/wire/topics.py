"""Topic names: parsing, normalising and validating them the way Pulsar does.

Clients send topic names in several spellings -- ``my-topic``, ``tenant/ns/my-topic``,
``persistent://tenant/ns/my-topic`` -- and name partitions ``<topic>-partition-<n>``. Every
layer (lookup, ownership, storage keys, admin paths) must agree on one canonical form, so it
is computed here, once, and a bad name becomes an InvalidTopicNameError (ServerError
InvalidTopicName) at the edge instead of a strange key deep in the metadata store.

Rules (Pulsar's, with Magnetar's stricter choices marked):
* domain ``persistent`` or ``non-persistent``; short names default to persistent in
  namespace ``public/default``;
* tenant and namespace: non-empty, only ``[A-Za-z0-9_.:=-]`` (Pulsar's NamedEntity rule);
* local name: non-empty, no ``/``; *Magnetar* also rejects whitespace, control characters,
  ``\\`` and the names ``.``/``..``, which would make storage paths and URLs ambiguous;
* the legacy four-part form with a cluster (``persistent://t/cluster/ns/topic``) is *not*
  supported: four or more parts are rejected;
* ``-partition-<n>``: n a canonical non-negative decimal below 2**31 makes the name a
  partition of the base name. *Magnetar* rejects non-canonical indexes (``-partition-01``)
  rather than silently aliasing two names to one partition.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass
from typing import Final

from magnetar.wire.errors import InvalidTopicNameError

PARTITION_SUFFIX: Final = "-partition-"
DEFAULT_TENANT: Final = "public"
DEFAULT_NAMESPACE: Final = "default"

_NAME_PART: Final = re.compile(r"[-=:.\w]+", re.ASCII)
_BAD_LOCAL_CHARS: Final = re.compile(r"[\s/\\\x00-\x1f\x7f]")
_PARTITION: Final = re.compile(r"(.+)-partition-(0|[1-9][0-9]{0,9})")
_MAX_PARTITION: Final = 2**31 - 1


class TopicDomain(enum.StrEnum):
    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


def check_name_part(value: str, what: str) -> str:
    """Validate a tenant or namespace name; returns it unchanged."""
    if not value:
        raise InvalidTopicNameError(f"{what} name is empty")
    if not _NAME_PART.fullmatch(value):
        raise InvalidTopicNameError(
            f"{what} name {value!r} may only contain letters, digits and _ . : = -"
        )
    return value


def _check_local_name(value: str, full: str) -> str:
    if not value:
        raise InvalidTopicNameError(f"topic name {full!r} has an empty local name")
    if _BAD_LOCAL_CHARS.search(value) or value in (".", ".."):
        raise InvalidTopicNameError(
            f"topic name {full!r}: local name {value!r} contains characters not allowed "
            "(whitespace, control characters, / or \\)"
        )
    return value


@dataclass(frozen=True, slots=True)
class TopicName:
    """A validated, canonical topic name. ``str()`` gives the full name."""

    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str
    #: Partition index when the local name ends in ``-partition-<n>``, else -1.
    partition_index: int = -1

    @staticmethod
    def parse(name: str) -> TopicName:
        """Parse any spelling a client may use; raises InvalidTopicNameError."""
        return _parse(name)

    @classmethod
    def of(
        cls,
        local_name: str,
        *,
        tenant: str = DEFAULT_TENANT,
        namespace: str = DEFAULT_NAMESPACE,
        domain: TopicDomain = TopicDomain.PERSISTENT,
    ) -> TopicName:
        """Build (and validate) a name from its parts."""
        return _parse(f"{domain}://{tenant}/{namespace}/{local_name}")

    @property
    def full_name(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        """``tenant/namespace``."""
        return f"{self.tenant}/{self.namespace}"

    @property
    def is_persistent(self) -> bool:
        return self.domain is TopicDomain.PERSISTENT

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def base_name(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        if self.partition_index < 0:
            return self
        base = self.local_name[: self.local_name.rindex(PARTITION_SUFFIX)]
        return TopicName(self.domain, self.tenant, self.namespace, base)

    def partition(self, index: int) -> TopicName:
        """The name of partition ``index`` of this (base) topic."""
        if not 0 <= index <= _MAX_PARTITION:
            raise InvalidTopicNameError(f"partition index {index} out of range")
        base = self.base_name
        return TopicName(
            base.domain,
            base.tenant,
            base.namespace,
            f"{base.local_name}{PARTITION_SUFFIX}{index}",
            index,
        )

    @property
    def rest_path(self) -> str:
        """``persistent/tenant/ns/topic`` as used in admin and HTTP lookup paths."""
        return f"{self.domain}/{self.tenant}/{self.namespace}/{self.local_name}"

    def __str__(self) -> str:
        return self.full_name


@functools.lru_cache(maxsize=8192)
def _parse(name: str) -> TopicName:
    if not isinstance(name, str) or not name:
        raise InvalidTopicNameError("topic name is empty")
    domain_str, sep, rest = name.partition("://")
    if sep:
        try:
            domain = TopicDomain(domain_str)
        except ValueError:
            raise InvalidTopicNameError(
                f"topic name {name!r} has domain {domain_str!r}; "
                "expected 'persistent' or 'non-persistent'"
            ) from None
        parts = rest.split("/")
        if len(parts) != 3:
            raise InvalidTopicNameError(
                f"topic name {name!r} must be <domain>://<tenant>/<namespace>/<topic>"
                + (" (legacy names with a cluster are not supported)" if len(parts) > 3 else "")
            )
    else:
        domain = TopicDomain.PERSISTENT
        parts = name.split("/")
        if len(parts) == 1:
            parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, name]
        elif len(parts) != 3:
            raise InvalidTopicNameError(
                f"short topic name {name!r} must be <topic> or <tenant>/<namespace>/<topic>"
            )
    tenant, namespace, local = parts
    check_name_part(tenant, "tenant")
    check_name_part(namespace, "namespace")
    _check_local_name(local, name)
    index = -1
    if PARTITION_SUFFIX in local:
        m = _PARTITION.fullmatch(local)
        if m is not None and int(m.group(2)) <= _MAX_PARTITION:
            index = int(m.group(2))
        elif local.rsplit(PARTITION_SUFFIX, 1)[1].isdigit():
            raise InvalidTopicNameError(
                f"topic name {name!r} has a non-canonical or out-of-range partition index"
            )
    return TopicName(domain, tenant, namespace, local, index)
