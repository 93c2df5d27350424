"""The bookies' rack placement set through the admin API, Pulsar's BookiesRackConfiguration.

One record (``/bookies/racks-info``, docs/metadata.md): ``{group: {bookie id: {rack,
hostname}}}``. A bookie named there is placed in that rack, whatever rack it registered with
(``magnetar bookie --rack``); the others keep their own -- as Pulsar's rack affinity mapping
reads the same document. A rack is a path (``/rack1``): a name given without the leading
slash gets one, as Pulsar's mapping does.
"""

from __future__ import annotations

import json
from typing import Any

from magnetar.metadata import api, keys

KEY = keys.BOOKIE_RACKS_INFO


def parse(raw: bytes | None) -> dict[str, dict[str, dict[str, Any]]]:
    """The stored configuration (empty when absent or not a JSON object of objects)."""
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {
        str(group): {str(b): dict(info) for b, info in members.items() if isinstance(info, dict)}
        for group, members in doc.items()
        if isinstance(members, dict)
    }


def normalized(rack: str) -> str:
    """A rack as placement compares them: a path with a leading slash."""
    return rack if rack.startswith("/") else "/" + rack


async def overrides(store: api.MetadataStore) -> dict[str, str]:
    """bookie id -> rack, for every bookie the configuration names with a rack."""
    record = await store.get(KEY)
    out: dict[str, str] = {}
    for members in parse(record.value if record is not None else None).values():
        for bookie_id, info in members.items():
            rack = info.get("rack")
            if isinstance(rack, str) and rack.strip("/"):
                out[bookie_id] = normalized(rack)
    return out
