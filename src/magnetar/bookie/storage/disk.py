"""Disk usage of the bookie's directories, for the read-only threshold.

Why this module exists: a bookie whose disk fills up must stop taking adds *before* writes
start failing half-way (BookKeeper's ``diskUsageThreshold``), and turn writable again once
compaction or deletions freed space (its low-water mark). One function, so tests can reason
about exactly what is measured.
"""

from __future__ import annotations

import os
from pathlib import Path


def used_fraction(path: Path) -> float:
    """Fraction of the filesystem holding ``path`` that is not available to us (0.0 - 1.0)."""
    st = os.statvfs(path)
    if st.f_blocks == 0:
        return 0.0
    return 1.0 - st.f_bavail / st.f_blocks
