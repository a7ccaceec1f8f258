"""The edge reads leader-named file slices only from the very file the leader
meant: a file swapped in at the same path (compaction) is never served."""
import os
import struct

import pytest

from core.config import BrokerConfig
from actors.edge_ports import RayActorCalls
from net.edge_service import EdgeService


def batch_at(base_offset: int, size: int = 64) -> bytes:
    return struct.pack(">q", base_offset) + b"\x01" * (size - 8)


def test_slice_from_a_swapped_file_is_refused(tmp_path):
    edge = EdgeService(BrokerConfig.from_sources(), 1, "127.0.0.1", 0,
                       calls=RayActorCalls.for_config(BrokerConfig.from_sources()))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch_at(580) + batch_at(590))
    inode = os.stat(path).st_ino
    assert edge.read_slices([(str(path), 0, 128, 580, inode)]) == batch_at(580) + batch_at(590)

    # The cleaner writes a new version and renames it over the old path.
    swapped = tmp_path / "00000000000000000000.log.swap"
    swapped.write_bytes(batch_at(580, 32) + batch_at(605))
    os.replace(swapped, path)
    # An fd still open on the old file serves the old, consistent bytes...
    assert edge.read_slices([(str(path), 0, 128, 580, inode)]) == batch_at(580) + batch_at(590)
    # ...but a reader that must open the path finds another file: ask the leader again.
    fresh = EdgeService(BrokerConfig.from_sources(), 1, "127.0.0.1", 0,
                       calls=RayActorCalls.for_config(BrokerConfig.from_sources()))
    with pytest.raises(FileNotFoundError):
        fresh.read_slices([(str(path), 0, 128, 580, inode)])
    fresh.close()
    new_inode = os.stat(path).st_ino
    assert edge.read_slices([(str(path), 0, 96, 580, new_inode)]) == batch_at(580, 32) + batch_at(605)
    with pytest.raises(FileNotFoundError):
        edge.read_slices([(str(path), 32, 64, 999, new_inode)])  # not the batch the leader named
    edge.close()
