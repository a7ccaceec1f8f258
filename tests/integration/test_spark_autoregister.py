"""Issue 22: with the project installed, a plain SparkSession in a fresh
Python process reads and writes the `raykafka` format. The script never
imports the project's `spark` package nor calls `register`; pyspark finds
`pyspark_raykafka` itself. Only the installed project is on its path: no
PYTHONPATH, and the working directory is elsewhere."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

from tests.broker_process import REPO

SCRIPT = r'''
import sys
from pyspark.sql import SparkSession

bootstrap, topic, copy = sys.argv[1:4]
spark = (SparkSession.builder.master("local[2]").appName("plain")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
df = (spark.read.format("raykafka").option("kafka.bootstrap.servers", bootstrap)
      .option("subscribe", topic).option("startingOffsets", "earliest").load())
rows = df.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value").collect()
print("READ", sorted((r.key, r.value) for r in rows) == sorted((f"k{i}", f"v{i}") for i in range(300)), len(rows))
(df.selectExpr("key", "upper(CAST(value AS STRING)) AS value").write.format("raykafka")
   .option("kafka.bootstrap.servers", bootstrap).option("topic", copy).mode("append").save())
again = (spark.read.format("raykafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", copy).option("startingOffsets", "earliest").load())
print("WROTE", again.count())
print("IMPORTED", "spark" in sys.modules, "pyspark_raykafka" in sys.modules)
spark.stop()
'''


def test_plain_spark_session_finds_the_raykafka_format(broker, tmp_path):
    from confluent_kafka import Producer

    topic = f"autoreg-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(300):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(60) == 0
    script = tmp_path / "plain_spark.py"
    script.write_text(SCRIPT)
    venv_bin = str(REPO / ".venv" / "bin")
    # As an activated virtualenv: its python first on PATH (Spark starts `python3` for its workers).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(PATH=os.pathsep.join([venv_bin, env.get("PATH", "")]), SPARK_LOCAL_IP="127.0.0.1",
               VIRTUAL_ENV=str(REPO / ".venv"))
    done = subprocess.run([os.path.join(venv_bin, "python"), str(script), broker.bootstrap, topic, topic + "-copy"],
                          cwd=tmp_path, env=env, capture_output=True, timeout=240)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()[-4000:]
    assert "READ True 300" in out, out
    assert "WROTE 300" in out, out
    # The driver never imported the project: Spark's lookup ran in its own Python worker.
    assert "IMPORTED False False" in out, out
