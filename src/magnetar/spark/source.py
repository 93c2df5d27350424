"""The ``magnetar`` Spark data source: one class Spark instantiates per read or write with
the user's options (checked at load() by ``schema()``), handing out the readers and writers
of ``read.py`` and ``write.py``."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from magnetar.spark import read, write


class MagnetarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> StructType:
        """Called by load() only: the read options are checked here, before anything runs."""
        return read.Settings.check(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return read.BatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return read.StreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return write.BatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return write.StreamWriter(self.options, schema)
