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
    """Register the ``raykafka`` format with a SparkSession.

    ``ray_address`` (the broker's Ray cluster, e.g. what Ray-on-Spark's
    ``setup_ray_cluster`` returns) becomes the default of the ``ray.address``
    option, which the Ray-native read path needs; ``ray_auth_token_path``
    (a file holding that cluster's Ray token) the default of
    ``ray.authTokenPath``."""
    from spark.source import RayKafkaDataSource, with_defaults

    defaults = {key: value for key, value in (("ray.address", ray_address),
                                              ("ray.authTokenPath", ray_auth_token_path)) if value}
    source = with_defaults(defaults) if defaults else RayKafkaDataSource
    spark.dataSource.register(source)


def local_session(*args, **kwargs):
    from spark.session import local_session as _local_session

    return _local_session(*args, **kwargs)


def prepare_environment(*args, **kwargs) -> None:
    from spark.session import prepare_environment as _prepare

    _prepare(*args, **kwargs)
