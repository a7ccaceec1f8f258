import multiprocessing
import os

import pytest

from storage.checkpoint import (
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    atomic_write,
)
from storage.errors import CorruptCheckpointError
from storage.meta_properties import (
    MetaProperties,
    format_properties,
    parse_properties,
    read_properties,
    write_properties,
)


def test_offset_checkpoint_round_trip_and_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    cp = OffsetCheckpointFile(path)
    assert cp.read() == {}
    entries = {("orders", 0): 100, ("orders", 1): 0, ("a.b-c_d", 12): 2**40}
    cp.write(entries)
    assert cp.read() == entries
    text = open(path).read()
    lines = text.splitlines()
    assert lines[0] == "0" and lines[1] == "3"
    assert sorted(lines[2:]) == sorted(["orders 0 100", "orders 1 0", f"a.b-c_d 12 {2**40}"])
    assert text.endswith("\n")
    assert not os.path.exists(path + ".tmp")


def test_offset_checkpoint_update_merges_and_removes(tmp_path):
    cp = OffsetCheckpointFile(str(tmp_path / "cp"))
    cp.update({("t", 0): 1, ("t", 1): 2})
    cp.update({("t", 1): 5, ("u", 0): 9})
    result = cp.update(remove=[("t", 0)])
    assert result == {("t", 1): 5, ("u", 0): 9}
    assert cp.read() == result


def test_empty_file_reads_as_empty(tmp_path):
    path = tmp_path / "cp"
    path.write_text("")
    assert OffsetCheckpointFile(str(path)).read() == {}


@pytest.mark.parametrize(
    "content",
    [
        "1\n0\n",  # unknown version
        "x\n0\n",
        "0\n",  # no count
        "0\nabc\n",
        "0\n2\nt 0 1\n",  # count mismatch
        "0\n1\nt 0\n",  # missing field
        "0\n1\nt zero 1\n",
        "0\n1\nt 0 1 extra\n",
        "0\n1\n\n",
    ],
)
def test_corrupt_offset_checkpoint_names_file(tmp_path, content):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError) as ei:
        OffsetCheckpointFile(str(path)).read()
    assert str(path) in str(ei.value)


def test_invalid_topic_name_rejected(tmp_path):
    with pytest.raises(ValueError):
        OffsetCheckpointFile(str(tmp_path / "cp")).write({("has space", 0): 1})


def _hammer(path, worker, count):
    cp = OffsetCheckpointFile(path)
    for i in range(count):
        cp.update({(f"topic{worker}", i): i * 10 + worker})


def test_concurrent_updates_from_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    ctx = multiprocessing.get_context("fork")
    workers, count = 4, 40
    procs = [ctx.Process(target=_hammer, args=(path, w, count)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    got = OffsetCheckpointFile(path).read()
    assert got == {(f"topic{w}", i): i * 10 + w for w in range(workers) for i in range(count)}


def test_leader_epoch_checkpoint_round_trip(tmp_path):
    path = str(tmp_path / "leader-epoch-checkpoint")
    cp = LeaderEpochCheckpointFile(path)
    assert cp.read() == []
    cp.write([(0, 0), (3, 120), (7, 4000)])
    assert cp.read() == [(0, 0), (3, 120), (7, 4000)]
    assert open(path).read() == "0\n3\n0 0\n3 120\n7 4000\n"
    cp.write([])
    assert cp.read() == []
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n3\n")
    with pytest.raises(CorruptCheckpointError, match="leader-epoch-checkpoint"):
        cp.read()


def test_atomic_write_replaces(tmp_path):
    path = str(tmp_path / "f")
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert open(path, "rb").read() == b"two"
    assert os.listdir(tmp_path) == ["f"]


def test_meta_properties_round_trip(tmp_path):
    mp = MetaProperties(cluster_id="XyZ-abc_123", broker_id=3)
    mp.write(str(tmp_path))
    text = (tmp_path / "meta.properties").read_text()
    assert "version=0" in text and "broker.id=3" in text and "cluster.id=XyZ-abc_123" in text
    assert MetaProperties.read(str(tmp_path)) == mp
    assert MetaProperties.read(str(tmp_path / "meta.properties")) == mp
    assert MetaProperties.read_if_exists(str(tmp_path / "nope")) is None


def test_meta_properties_kraft_v1(tmp_path):
    path = tmp_path / "meta.properties"
    path.write_text("#comment\n! other comment\nversion=1\nnode.id=4\ncluster.id=abc\ndirectory.id=dirX\n")
    mp = MetaProperties.read(str(path))
    assert (mp.version, mp.broker_id, mp.cluster_id) == (1, 4, "abc")
    assert mp.extra == {"directory.id": "dirX"}
    mp.write(str(path))
    assert MetaProperties.read(str(path)) == mp


@pytest.mark.parametrize("content", ["broker.id=1\n", "version=x\n", "version=9\n", "version=0\nbroker.id=z\n"])
def test_meta_properties_corrupt(tmp_path, content):
    path = tmp_path / "meta.properties"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError):
        MetaProperties.read(str(path))


def test_java_properties_syntax():
    text = "a = b\\\n    c\nkey:val\nk v w\n  # indented comment\nesc\\ key=x\\ty\\u0041\n"
    assert parse_properties(text) == {"a": "bc", "key": "val", "k": "v w", "esc key": "x\tyA"}
    props = {"weird key=:": " lead # and = and \\", "uni": "é😀"}
    assert parse_properties(format_properties(props)) == props


def test_write_properties_file(tmp_path):
    path = str(tmp_path / "x.properties")
    write_properties(path, {"a": "1"})
    assert read_properties(path) == {"a": "1"}
