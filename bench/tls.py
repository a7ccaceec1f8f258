"""Produce and consume MB/s over PLAINTEXT, SSL and SASL_SSL in one run, on
one broker with all three listeners (issue 21).

Under TLS a fetch cannot use sendfile(2) (the kernel would bypass the
encryption): the edge reads each file region of the response with pread
into memory and writes it through the asyncio SSL transport, which encrypts
it in user space (net/server.py, _write_frame / _write_exact). This
measures what that costs against the PLAINTEXT path (sendfile).

    .venv/bin/python -m bench.tls --mb 200 --record-bytes 1024
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _produce(config: dict, topic: str, total: int, record: bytes) -> float:
    from confluent_kafka import Producer

    producer = Producer({**config, "linger.ms": 5, "batch.size": 1 << 20, "compression.type": "none",
                         "queue.buffering.max.kbytes": 1 << 20})
    started = time.perf_counter()
    for _ in range(total // len(record)):
        while True:
            try:
                producer.produce(topic, record)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(300) == 0
    return total / (time.perf_counter() - started) / 1e6


def _consume(config: dict, topic: str, total: int) -> float:
    from confluent_kafka import Consumer

    consumer = Consumer({**config, "group.id": f"bench-{time.time_ns()}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "fetch.max.bytes": 50 << 20,
                         "max.partition.fetch.bytes": 8 << 20})
    consumer.subscribe([topic])
    received, started = 0, None
    deadline = time.monotonic() + 300
    while received < total and time.monotonic() < deadline:
        messages = consumer.consume(10000, 1.0)
        if messages and started is None:
            started = time.perf_counter()
        for message in messages:
            if message.error() is None:
                received += len(message.value())
    elapsed = time.perf_counter() - started
    consumer.close()
    return received / elapsed / 1e6


def _tansu_plaintext(work: Path, total: int, record: bytes) -> dict:
    """Produce and consume over Tansu's PLAINTEXT listener (in-memory storage)."""
    import subprocess

    from bench.targets import TANSU_SH

    port = _free_port()
    with open(work / "tansu.log", "wb") as out:
        tansu = subprocess.Popen(["bash", str(TANSU_SH), str(port)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while b"ready in" not in (work / "tansu.log").read_bytes():
            if tansu.poll() is not None or time.monotonic() > deadline:
                return {"error": f"tansu did not start (see {work / 'tansu.log'})"}
            time.sleep(0.2)
        config = {"bootstrap.servers": f"127.0.0.1:{port}"}
        produce = _produce(config, "bench-tansu", total, record)
        consume = _consume(config, "bench-tansu", total)
        return {"produce_MBps": round(produce, 1), "consume_MBps": round(consume, 1)}
    finally:
        tansu.terminate()
        tansu.wait(30)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--tansu", action="store_true",
                        help="also Tansu (the peer script's build, PLAINTEXT: it completes no TLS handshake "
                             "with our PEM certificates) in the same run, after raykafka")
    args = parser.parse_args(argv)
    from tests.broker_process import BrokerProcess
    from tests.security_certs import make_pki

    work = Path(tempfile.mkdtemp(prefix="rk-bench-tls-"))
    pki = make_pki(work / "pki")
    ssl_port, sasl_ssl_port = _free_port(), _free_port()
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_bench="bench-secret";')
    broker = BrokerProcess(work / "data", overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["broker"]),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        "log.segment.bytes": str(256 << 20), "offsets.topic.num.partitions": "1",
    }).start()
    configs = {
        "PLAINTEXT": {"bootstrap.servers": broker.bootstrap},
        "SSL": {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
                "ssl.ca.location": str(pki["ca"])},
        "SASL_SSL": {"bootstrap.servers": f"127.0.0.1:{sasl_ssl_port}", "security.protocol": "SASL_SSL",
                     "ssl.ca.location": str(pki["ca"]), "sasl.mechanism": "PLAIN", "sasl.username": "bench",
                     "sasl.password": "bench-secret"},
    }
    record = b"x" * args.record_bytes
    total = args.mb * 1_000_000 // len(record) * len(record)  # whole records
    results = {}
    try:
        for name, config in configs.items():
            topic = f"bench-{name.lower()}"
            produce = _produce(config, topic, total, record)
            consume = _consume(config, topic, total)
            results[name] = {"produce_MBps": round(produce, 1), "consume_MBps": round(consume, 1)}
            print(name, results[name], flush=True)
        # Consume the PLAINTEXT topic over TLS too: the same bytes on disk, read both ways.
        results["PLAINTEXT topic read over SSL"] = {"consume_MBps": round(_consume(configs["SSL"], "bench-plaintext",
                                                                                    total), 1)}
        results["PLAINTEXT topic read again over PLAINTEXT"] = {
            "consume_MBps": round(_consume(configs["PLAINTEXT"], "bench-plaintext", total), 1)}
    finally:
        broker.stop()
    if args.tansu:
        results["tansu PLAINTEXT"] = _tansu_plaintext(work, total, record)
        print("tansu PLAINTEXT", results["tansu PLAINTEXT"], flush=True)
    print(json.dumps({"mb": args.mb, "record_bytes": args.record_bytes, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
