"""Standard status conditions (type, status, reason, message, lastTransitionTime).

``merge`` keeps a condition's ``lastTransitionTime`` while its status does not change, so
``kubectl wait --for=condition=Ready`` and alerting on transitions behave as elsewhere in
Kubernetes. Pure: the caller passes the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from magnetar_operator.spec import Json

READY = "Ready"
METADATA_READY = "MetadataReady"
BOOKIES_READY = "BookiesReady"
BROKERS_READY = "BrokersReady"
OFFLOAD_READY = "OffloadReady"
PROXY_READY = "ProxyReady"
"""Only when ``spec.proxy.enabled``."""
AUTORECOVERY_READY = "AutorecoveryReady"
"""Only with ``spec.tls`` (the autorecovery Deployment; without TLS the bookies run it)."""
CERTIFICATES_READY = "CertificatesReady"
"""Only with ``spec.tls``: every certificate Secret holds a valid certificate."""
AUTH_READY = "AuthReady"
"""Only with ``spec.auth``: the signing key and the operator's, brokers' (and proxy's)
tokens exist."""
CLUSTER_TYPES = (METADATA_READY, BOOKIES_READY, BROKERS_READY, OFFLOAD_READY)


@dataclass(frozen=True)
class Condition:
    type: str
    ok: bool
    reason: str
    message: str = ""

    @property
    def status(self) -> str:
        return "True" if self.ok else "False"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge(
    old: Sequence[Mapping[str, Any]] | None,
    new: Iterable[Condition],
    *,
    now: str,
    generation: int | None = None,
) -> list[Json]:
    """The conditions list to write: ``new`` with transition times carried over from ``old``."""
    previous = {str(c.get("type")): c for c in old or ()}
    out: list[Json] = []
    for cond in new:
        before = previous.get(cond.type)
        changed = before is None or before.get("status") != cond.status
        item: Json = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "lastTransitionTime": now
            if changed or before is None
            else str(before.get("lastTransitionTime", now)),
        }
        if generation is not None:
            item["observedGeneration"] = generation
        out.append(item)
    return out


def summary(conditions: Sequence[Condition]) -> Condition:
    """The ``Ready`` condition: True when all others are, else the first failing reason."""
    failing = [c for c in conditions if not c.ok]
    if not failing:
        return Condition(READY, True, "AllComponentsReady", "all components are ready")
    first = failing[0]
    return Condition(READY, False, first.reason, f"{first.type}: {first.message}")


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions or ())


def holds(conditions: Sequence[Mapping[str, Any]] | None, cond: Condition) -> bool:
    """Whether the stored conditions already say ``cond`` (same type, status, reason and
    message): a caller reporting it again would only repeat itself."""
    return any(
        c.get("type") == cond.type
        and c.get("status") == cond.status
        and c.get("reason") == cond.reason
        and c.get("message") == cond.message
        for c in conditions or ()
    )
