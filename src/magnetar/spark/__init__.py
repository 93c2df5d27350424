"""A PySpark data source for Magnetar topics (``spark.read/readStream/write/writeStream
.format("magnetar")``), built on PySpark 4's Python Data Source API and the official Pulsar
client; installed with the optional dependency group ``spark``. See docs/spark.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``format("magnetar")`` known to the session."""
    from magnetar.spark.source import MagnetarDataSource

    spark.dataSource.register(MagnetarDataSource)
