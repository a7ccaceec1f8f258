"""The `raykafka` format for every SparkSession, with no import and no
registration call.

pyspark 4.x looks for top-level packages whose names start with `pyspark_`
when a session first needs a Python data source, and registers the
`DefaultSource` each of them exposes under its `name()`
(pyspark/sql/worker/lookup_data_sources.py). Installing raykafka installs
this package, so

    spark.read.format("raykafka").option("kafka.bootstrap.servers", ...)
    df.write.format("raykafka")...

work in any session whose Python (PYSPARK_PYTHON on the driver and the
executors) has raykafka installed. `spark.register(spark, ray_address=...)`
stays for explicit use (a default `ray.address`).
"""
from spark.source import RayKafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
