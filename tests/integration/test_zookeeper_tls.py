"""zookeeper.ssl.*: a broker whose only way to ZooKeeper is TLS (issue 28,
item 6). Debian's ZooKeeper 3.8 serves a secure client port with Netty
(`serverCnxnFactory=NettyServerCnxnFactory`, Netty from Debian's libnetty-java,
which the zookeeper package installs); the test's ZooKeeper has no plain
port at all, and requires a client certificate (`ssl.clientAuth=need`), so a
broker that reaches it at all went through TLS with the keystore it was given."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from metadata.embedded_zookeeper import find_java, zookeeper_classpath
from tests.broker_process import BrokerProcess
from tests.cli_runner import wait_for
from tests.kafka_admin import create_topic
from tests.security_certs import make_pki

NETTY_JARS = ("netty-buffer", "netty-codec", "netty-common", "netty-handler", "netty-resolver", "netty-transport",
              "netty-transport-native-unix-common", "netty-transport-native-epoll")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def tls_zookeeper(tmp_path):
    jars = [Path("/usr/share/java") / f"{name}.jar" for name in NETTY_JARS]
    if not all(j.is_file() for j in jars[:6]):
        pytest.skip("Netty jars (Debian libnetty-java) not installed: ZooKeeper cannot serve TLS")
    pki = make_pki(tmp_path / "pki")
    port = _free_port()
    data = tmp_path / "zk-data"
    data.mkdir()
    config = tmp_path / "zoo.cfg"
    config.write_text("\n".join([
        "tickTime=2000", f"dataDir={data}", f"secureClientPort={port}", "secureClientPortAddress=127.0.0.1",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        f"ssl.keyStore.location={pki['broker']}", "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={pki['ca']}", "ssl.trustStore.type=PEM",
        "ssl.clientAuth=need", "admin.enableServer=false", ""]))
    classpath = ":".join([zookeeper_classpath(), *(str(j) for j in jars if j.is_file())])
    log = open(tmp_path / "zookeeper.log", "wb")
    server = subprocess.Popen([find_java(), "-Xmx128m", "-cp", classpath, "-Dzookeeper.admin.enableServer=false",
                               "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _port_open(port) or server.poll() is not None, 90, "ZooKeeper's secure port")
        assert server.poll() is None, (tmp_path / "zookeeper.log").read_text(errors="replace")[-3000:]
        yield port, pki, tmp_path
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def test_broker_works_through_zookeeper_tls_only(tls_zookeeper):
    port, pki, base = tls_zookeeper
    tls = {"zookeeper.connect": f"127.0.0.1:{port}", "zookeeper.ssl.client.enable": "true",
           "zookeeper.ssl.truststore.location": str(pki["ca"]),
           "zookeeper.ssl.keystore.location": str(pki["broker"])}
    # Without a client certificate the handshake fails: ZooKeeper wants one.
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    # (3 s: a refused handshake fails at once on loopback; kazoo retries it until then.)
    anonymous = KazooClient(hosts=f"127.0.0.1:{port}", use_ssl=True, ca=str(pki["ca"]), timeout=3)
    with pytest.raises(KazooTimeoutError):
        anonymous.start(timeout=3)
    anonymous.stop()

    broker = BrokerProcess(base / "data", overrides={**tls, "offsets.topic.num.partitions": "1"})
    broker.start(timeout_s=240)
    try:
        # Topic creation goes through the controller's ZooKeeper session, and
        # the topic reaching Metadata through the edge's watch on it.
        create_topic(broker.bootstrap, "over-zk-tls", 2)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        wait_for(lambda: len(admin.list_topics("over-zk-tls", timeout=10).topics["over-zk-tls"].partitions) == 2,
                 60, "the topic in Metadata")
        assert "use_ssl: True" in broker.log_path.read_text(errors="replace")
        del admin  # no client left retrying the stopped broker
    finally:
        code = broker.stop()
    assert code == 0, broker.log_tail()
    # What the broker wrote is in this ZooKeeper, read back over TLS with a certificate.
    reader = KazooClient(hosts=f"127.0.0.1:{port}", use_ssl=True, ca=str(pki["ca"]), certfile=str(pki["broker"]),
                         keyfile=str(pki["broker"]), timeout=10)
    reader.start(timeout=30)
    try:
        assert "over-zk-tls" in reader.get_children("/brokers/topics")
    finally:
        reader.stop()
