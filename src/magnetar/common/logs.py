"""Process-wide logging setup for the ``magnetar`` commands (one place, one format)."""

from __future__ import annotations

import logging
import os


def setup(level: str | None = None) -> None:
    logging.basicConfig(
        level=(level or os.environ.get("MAGNETAR_LOG_LEVEL", "INFO")).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
