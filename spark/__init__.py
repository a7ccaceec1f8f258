"""Spark integration for raykafka: a PySpark data source named ``raykafka``
with the columns and options of Spark's Kafka source and sink, reading over
the Kafka protocol or — inside the broker's Ray cluster — straight from the
replicas' segment files. See docs/spark.md.

    from spark import register
    register(spark)                     # spark: a pyspark.sql.SparkSession
    spark.read.format("raykafka").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
         .option("subscribe", "events").load()
"""
from __future__ import annotations

__all__ = ["register", "local_session", "prepare_environment"]


def register(spark, ray_address: str | None = None, ray_auth_token_path: str | None = None) -> None:
    """Register the ``raykafka`` format with a SparkSession: see spark.registration.register."""
    from spark.registration import register as _register

    _register(spark, ray_address, ray_auth_token_path)


def local_session(*args, **kwargs):
    from spark.session import local_session as _local_session

    return _local_session(*args, **kwargs)


def prepare_environment(*args, **kwargs) -> None:
    from spark.session import prepare_environment as _prepare

    _prepare(*args, **kwargs)
