"""EmbeddedZooKeeper against the real Debian ZooKeeper: lifecycle, port memory, errors."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from metadata import embedded_zookeeper
from metadata.embedded_zookeeper import (
    EmbeddedZooKeeper,
    ZooKeeperAlreadyRunningError,
    ZooKeeperNotInstalledError,
    ZooKeeperStartError,
)
from metadata.testing import TEST_TICK_TIME_MS, TEST_ZOOKEEPER_CONFIG

pytestmark = pytest.mark.skipif(
    not embedded_zookeeper.DEBIAN_ZOOKEEPER_JAR.is_file(), reason="Debian's zookeeper package is not installed"
)


def make_server(data_dir: Path, port: int | None = None) -> EmbeddedZooKeeper:
    return EmbeddedZooKeeper(data_dir, port=port, tick_time_ms=TEST_TICK_TIME_MS, extra_config=TEST_ZOOKEEPER_CONFIG)


def kazoo_session(connect_string: str) -> KazooClient:
    client = KazooClient(hosts=connect_string, timeout=5.0)
    client.start(timeout=10)
    return client


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A reaped child is gone; an unreaped one would show as a zombie.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_restart_on_same_directory_keeps_data_and_port(tmp_path):
    server = make_server(tmp_path / "zk")
    connect_string = server.start()
    assert connect_string == f"127.0.0.1:{server.port}"
    assert server.connect_string == connect_string
    first_pid = server.pid
    assert process_exists(first_pid)
    assert (tmp_path / "zk" / "zookeeper.port").read_text().strip() == str(server.port)
    config = (tmp_path / "zk" / "zoo.cfg").read_text()
    assert "clientPortAddress=127.0.0.1" in config
    assert f"dataDir={tmp_path / 'zk' / 'data'}" in config
    assert "4lw.commands.whitelist=ruok,srvr,stat" in config

    client = kazoo_session(connect_string)
    client.create("/kept", b"payload")
    client.stop()
    client.close()

    server.stop()
    assert server.pid is None
    assert not server.is_running()
    assert not process_exists(first_pid)
    server.stop()  # idempotent

    # A new object on the same directory, as after a broker restart.
    again = make_server(tmp_path / "zk")
    assert again.start() == connect_string
    try:
        assert again.pid != first_pid
        client = kazoo_session(again.connect_string)
        assert client.get("/kept")[0] == b"payload"
        client.stop()
        client.close()
    finally:
        again.stop()
    log_text = (tmp_path / "zk" / "zookeeper.log").read_text()
    assert log_text.count("===== starting ZooKeeper") == 2
    assert "binding to port" in log_text  # the server's own log lines are captured


def test_remembered_port_taken_by_someone_else_falls_back_to_a_new_port(tmp_path):
    server = make_server(tmp_path / "a")
    server.start()
    remembered = server.port
    server.stop()
    squatter = make_server(tmp_path / "squatter", port=remembered)
    squatter.start()
    try:
        server.start()
        try:
            assert server.port != remembered
            assert (tmp_path / "a" / "zookeeper.port").read_text().strip() == str(server.port)
        finally:
            server.stop()
    finally:
        squatter.stop()


def test_explicit_port_in_use_fails_with_the_log_tail(tmp_path):
    with make_server(tmp_path / "first") as first:
        second = make_server(tmp_path / "second", port=first.port)
        with pytest.raises(ZooKeeperStartError) as raised:
            second.start()
        assert "Address already in use" in str(raised.value)
        assert second.pid is None
        assert first.is_running()


def test_a_second_server_on_a_running_directory_is_refused(tmp_path):
    with make_server(tmp_path / "zk") as running:
        intruder = make_server(tmp_path / "zk")
        with pytest.raises(ZooKeeperAlreadyRunningError) as raised:
            intruder.start()
        assert raised.value.pid == running.pid
        assert raised.value.port == running.port


def test_start_is_idempotent_and_context_manager_stops(tmp_path):
    with make_server(tmp_path / "zk") as server:
        pid = server.pid
        assert server.start() == server.connect_string
        assert server.pid == pid
    assert not process_exists(pid)
    with pytest.raises(embedded_zookeeper.ZooKeeperError):
        _ = server.connect_string


def test_server_that_dies_during_start_reports_its_log(tmp_path):
    # An unparsable tickTime makes ZooKeeper exit at once.
    server = EmbeddedZooKeeper(tmp_path / "zk", extra_config={"tickTime": "not-a-number"})
    with pytest.raises(ZooKeeperStartError) as raised:
        server.start(timeout_s=20)
    assert "exited with code" in str(raised.value)
    assert raised.value.log_tail
    assert not server.is_running()


def test_missing_java_names_the_package(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(embedded_zookeeper.shutil, "which", lambda name: None)
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install default-jre-headless"):
        make_server(tmp_path / "zk").start()


def test_missing_zookeeper_jar_names_the_package(tmp_path):
    server = EmbeddedZooKeeper(tmp_path / "zk", zookeeper_jar=tmp_path / "nowhere" / "zookeeper.jar")
    with pytest.raises(ZooKeeperNotInstalledError, match="apt-get install zookeeper"):
        server.start()
