"""Registering the ``raykafka`` data source with a SparkSession (its own module so that
spark.session can register without importing the package it belongs to)."""
from __future__ import annotations


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
