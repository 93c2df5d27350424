"""The sink's options and columns, checked on the driver without Spark or a broker: a write
takes a reader's options, the producer options (Pulsar's names) map onto the official
client's producer, and what the sink cannot honour is refused naming the problem."""

from __future__ import annotations

import pulsar
import pytest
from pyspark.sql import Row
from pyspark.sql.types import LongType, StringType, StructField, StructType

from magnetar.spark import options as opts
from magnetar.spark import write
from magnetar.spark.options import MagnetarSourceError


def _lower(**options: str) -> dict[str, str]:
    return {k.lower(): v for k, v in options.items()}  # as Spark hands them over


def test_a_write_knows_every_option_of_a_read() -> None:
    assert set(opts.READ_OPTION_NAMES) <= set(opts.WRITE_OPTION_NAMES)


def test_producer_options_map_onto_the_official_client() -> None:
    settings = write.ProducerSettings.parse(
        _lower(
            compressionType="zstd",
            batchingEnabled="true",
            batchingMaxMessages="10",
            batchingMaxPublishDelayMs="50",
            messageRoutingMode="singlepartition",
            keyColumn="account",
        ),
        streaming=False,
    )
    assert settings.official_producer_options() == {
        "compression_type": pulsar.CompressionType.ZSTD,
        "batching_enabled": True,
        "batching_max_messages": 10,
        "batching_max_publish_delay_ms": 50,
        "message_routing_mode": pulsar.PartitionsRoutingMode.UseSinglePartition,
    }
    assert settings.key_column == "account"
    zlib = write.ProducerSettings.parse(_lower(compressionType="ZLIB"), streaming=False)
    assert zlib.official_producer_options()["compression_type"] == pulsar.CompressionType.ZLib
    defaults = write.ProducerSettings.parse({}, streaming=False)
    assert defaults.batching and defaults.routing == "RoundRobinPartition"
    assert not write.ProducerSettings.parse({}, streaming=True).batching


@pytest.mark.parametrize(
    ("options", "streaming", "problem"),
    [
        ({"compressionType": "brotli"}, False, "compressionType must be one of NONE, LZ4"),
        ({"messageRoutingMode": "CustomPartition"}, False, "messageRoutingMode must be"),
        ({"batchingMaxMessages": "0"}, False, "batchingMaxMessages must be a positive"),
        ({"batchingEnabled": "yes"}, False, "batchingEnabled must be true or false"),
        ({"batchingEnabled": "true"}, True, "the streaming sink sends one message per entry"),
        ({"producerName": "p"}, True, "the streaming sink names its producers"),
    ],
)
def test_bad_producer_options(options: dict[str, str], streaming: bool, problem: str) -> None:
    with pytest.raises(MagnetarSourceError, match=problem):
        write.ProducerSettings.parse(_lower(**options), streaming=streaming)


def _schema(*columns: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns])  # type: ignore[arg-type]


def test_columns_with_a_key_column_and_sequence_ids() -> None:
    write._check_columns(
        _schema(("account", StringType()), ("value", StringType()), ("sequenceId", LongType())),
        key_column="account",
        streaming=False,
    )
    with pytest.raises(MagnetarSourceError, match="keyColumn names 'acct'"):
        write._check_columns(_schema(("value", StringType())), key_column="acct", streaming=False)
    with pytest.raises(MagnetarSourceError, match="column sequenceId has type string"):
        write._check_columns(
            _schema(("value", StringType()), ("sequenceId", StringType())),
            key_column="key",
            streaming=False,
        )
    with pytest.raises(MagnetarSourceError, match="numbers its messages itself"):
        write._check_columns(
            _schema(("value", StringType()), ("sequenceId", LongType())),
            key_column="key",
            streaming=True,
        )


def test_a_sequence_id_below_one_is_refused_naming_it() -> None:
    assert write._message(Row(value=b"v", sequenceId=7))[1]["sequence_id"] == 7
    with pytest.raises(MagnetarSourceError, match="sequenceId: 0 is not a sequence id"):
        write._message(Row(value=b"v", sequenceId=0))
