"""`raykafka start` refuses bad configuration before starting anything."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_start(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "cli.main", "start", "--data-dir", str(tmp_path / "d"), *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


@pytest.mark.parametrize("override,key", [
    ("log.segmnet.bytes=100", "log.segmnet.bytes"),
    ("num.partitions=-3", "num.partitions"),
    ("listeners=nonsense", "listeners"),
    ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
    ("novalue", "novalue"),
])
def test_bad_override_is_named_and_exits_nonzero(tmp_path, override, key):
    result = run_start(tmp_path, "--override", override)
    assert result.returncode == 2
    assert key in result.stderr and "invalid configuration" in result.stderr
    assert not (tmp_path / "d").exists(), "nothing should be started or created"


def test_bad_key_in_config_file(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("broker.id=1\nzookeeper.connnect=localhost:2181\n")
    result = run_start(tmp_path, "--config", str(props))
    assert result.returncode == 2 and "zookeeper.connnect" in result.stderr


def test_missing_config_file(tmp_path):
    result = run_start(tmp_path, "--config", str(tmp_path / "nope.properties"))
    assert result.returncode == 2 and "nope.properties" in result.stderr


def test_bad_env_override(tmp_path):
    import os
    env = dict(os.environ, RAYKAFKA_MESSAGE_MAX_BYTES="lots")
    result = subprocess.run([sys.executable, "-m", "cli.main", "start", "--data-dir", str(tmp_path / "d")],
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert result.returncode == 2 and "message.max.bytes" in result.stderr
