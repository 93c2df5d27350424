"""A local-mode SparkSession for tests and benchmarks: everything on 127.0.0.1, no UI, the
Python workers run by this interpreter (so they import magnetar), the magnetar source
registered."""

from __future__ import annotations

import os
import sys
from typing import Any

from tests.support.procs import LOOPBACK


def local_session(app: str, *, cores: int = 2) -> Any:
    from pyspark.sql import SparkSession

    import magnetar.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", LOOPBACK)
        .config("spark.driver.bindAddress", LOOPBACK)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(session)
    return session
